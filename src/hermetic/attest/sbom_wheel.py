"""The CycloneDX SBOM of a wheel `hermetic wheel` built: wheel_sbom, known by this module's name too.

Its builders live in sbom.py, beside the LLVM part they embed (the LLVM a wheel links may be a hermetic
build, with its own record): importing that part from here put attest.attach a layer higher.
"""

from hermetic.attest.sbom import wheel_sbom as wheel_sbom
