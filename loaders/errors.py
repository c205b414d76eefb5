"""The one error the loaders raise for a loader that cannot be built or run as asked. Its own module, so that the
package's `build_loader` and the modules it imports (base.py, integrity.py) all import it from here, and none of them
imports the package back; `from loaders import LoaderError` is the same class."""


class LoaderError(ValueError):
    """A loader cannot be built as asked; the message says what to do."""
