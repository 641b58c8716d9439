"""A hook module that exists but cannot be imported (a dependency of it is missing)."""

import a_dependency_that_is_not_installed  # noqa: F401


def hook() -> None:
    pass
