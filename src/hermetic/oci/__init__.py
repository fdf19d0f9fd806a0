"""OCI images of install trees: deterministic layers, image layouts, a registry client, safe unpack.

Everything here uses only the standard library so that an image can be made,
pushed and pulled on a machine without buildah, podman or docker.
"""

from __future__ import annotations
