"""A plug-in module whose import fails."""

import probe_this_package_does_not_exist  # noqa: F401
