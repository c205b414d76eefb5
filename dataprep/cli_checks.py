"""What dataprep's commands share as they parse and end: a location as a Path or an s3:// URL kept as text, and the
known failures as one-line errors (click's ClickException, exit 1) with whatever they quote from the data escaped."""

from __future__ import annotations

from pathlib import Path

import click


def location(ctx, param, value: str | None):
    """A local path as a Path; s3:// URLs and brace patterns as given (pathlib would fold the // of s3://)."""
    if value is None:
        return None
    return value if value.startswith("s3://") or "{" in value else Path(value)


def guard(fn, *args):
    """Known failures become one-line errors with a non-zero exit, never a traceback; whatever they quote from the
    data (file names, classes) is shown with control characters escaped."""
    from common.text import printable

    from .convert import ConvertError
    from .manifest import ManifestError
    from .parallel import WorkerDied
    from .sources import BadSample, InputError
    from .workdir import OutputError

    try:
        return fn(*args)
    except BadSample as e:
        message = f"bad input file {e}; fix or remove it, or pass --on-bad-file skip"
        raise click.ClickException(printable(message)) from None
    except (InputError, ConvertError, ManifestError, OutputError, ValueError) as e:
        raise click.ClickException(printable(str(e))) from None
    except WorkerDied as e:
        message = f"a worker process died: {e}; its work is lost, so nothing was published (dmesg names the killer)"
        raise click.ClickException(printable(message)) from None
    except OSError as e:
        raise click.ClickException(printable(f"{e.filename or ''}: {e.strerror or e}")) from None
