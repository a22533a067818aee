"""The bundle on disk, torch-free: what ``edgebert export`` writes and the runtime, ``check``, ``bench``
and ``evaluate`` open. ``manifest`` is the ``Manifest`` type (the only code that knows manifest.json's
keys and versions); ``reader`` opens a bundle directory, keeps every file inside it and re-hashes them."""

from edgebert.bundle.manifest import *  # noqa: F401,F403
from edgebert.bundle.reader import *  # noqa: F401,F403
from edgebert.bundle.reader import __all__  # noqa: F401
