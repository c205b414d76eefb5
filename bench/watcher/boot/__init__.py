"""Never imported: `bench watch` puts this folder first on the watched program's PYTHONPATH, so that Python runs its
sitecustomize.py there. A package so that setuptools installs the folder as it finds it, without a warning page."""
