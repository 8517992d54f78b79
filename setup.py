"""Builds the C library with the project's Makefile and ships it inside the package (flashdec/_lib/)."""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    """Builds the C library with the Makefile outside the source tree (a temporary folder; FLASHDEC_BUILD_DIR names
    one to reuse, as `make wheel` does with the checkout's build/) and ships it. `pip install -v .` shows the build."""

    def run(self):
        jobs = str(max(1, os.cpu_count() or 1))
        build = os.environ.get("FLASHDEC_BUILD_DIR")
        temp = None if build else tempfile.mkdtemp(prefix="flashdec-build-")
        build = os.path.abspath(build or temp)
        print(f"flashdec: building the C library in {build} (make lib: libflashdec.so, and the CUDA module "
              f"where nvcc is found)", file=sys.stderr, flush=True)
        extra = os.environ.get("FLASHDEC_MAKE_ARGS", "").split()  # e.g. a cross build: CC=... ARCH=aarch64 CUDA=0
        subprocess.check_call(["make", "-C", ROOT, "-j", jobs, "BUILD=" + build] + extra + ["lib"])
        super().run()
        dest = os.path.join(self.build_lib, "flashdec", "_lib")
        shutil.rmtree(dest, ignore_errors=True)  # nothing of an earlier build (another platform's module)
        os.makedirs(dest)
        # the library, and the CUDA backend's module where this machine built one (the library loads it if it can)
        for name in ("libflashdec.so", "libflashdec_cuda.so"):
            if os.path.exists(os.path.join(build, name)):
                shutil.copy2(os.path.join(build, name), os.path.join(dest, name))
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1
    from wheel.bdist_wheel import bdist_wheel


class Wheel(bdist_wheel):
    """py3-none-<platform>: the package is Python code over a shared library it loads with ctypes, for any Python 3."""

    def get_tag(self):
        # FLASHDEC_WHEEL_PLAT: the platform of a cross-built library (make wheel-arm64)
        return ("py3", "none", os.environ.get("FLASHDEC_WHEEL_PLAT") or super().get_tag()[2])


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel carries a shared library: platform-specific
        return True


def version():
    """The version's one definition: include/flashdec.h's FDEC_VERSION_* lines."""
    with open(os.path.join(ROOT, "include", "flashdec.h")) as f:
        parts = dict(re.findall(r"#define FDEC_VERSION_(MAJOR|MINOR|PATCH) (\d+)", f.read()))
    return "{MAJOR}.{MINOR}.{PATCH}".format(**parts)


# setuptools' own build folders (build/lib, build/bdist.*) outside the source tree too, removed at exit
BUILD_BASE = tempfile.mkdtemp(prefix="flashdec-setup-")
atexit.register(shutil.rmtree, BUILD_BASE, True)

setup(version=version(), cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": Wheel}, distclass=BinaryDistribution,
      options={"build": {"build_base": BUILD_BASE}})
