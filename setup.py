"""`pip install .`: the Python module (python/, docs/python.md), built by CMake.

setuptools drives CMake: it configures this tree with RECUR_PYTHON=ON (tests, benchmarks and the
CLI off), builds the one target recur_python and puts the module into the package. Every build
dependency is Debian's (tools/build.sh python installs them: pybind11-dev, python3-pybind11,
python3-numpy, python3-dev, and the library's own); nothing comes from PyPI. There is no
pyproject.toml on purpose: pip then builds with the setuptools and wheel already installed
instead of fetching them into an isolated environment.

CMAKE_ARGS in the environment adds CMake arguments (-DCMAKE_CXX_COMPILER_LAUNCHER=ccache, ...);
CMAKE_BUILD_PARALLEL_LEVEL sets the build's jobs (default: every core).
"""
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def version():
    # project(recur VERSION x.y.z ...) in CMakeLists.txt is the one place the version is written.
    for line in (ROOT / "CMakeLists.txt").read_text().splitlines():
        if line.startswith("project(recur VERSION "):
            return line.split()[2]
    raise RuntimeError("CMakeLists.txt names no version")


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        build.mkdir(parents=True, exist_ok=True)
        args = ["-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                "-DRECUR_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}",
                "-DRECUR_BUILD_TESTS=OFF", "-DRECUR_BUILD_BENCHMARKS=OFF",
                "-DRECUR_BUILD_TOOLS=OFF", "-DRECUR_SERVE=OFF"]
        if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(["cmake", *args], check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build), "--target", "recur_python", "-j", jobs],
                       check=True)
        built = next((build / "python" / "recur").glob("_recur*.so"))
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, out)


setup(
    name="recur",
    version=version(),
    description="Recurrent language models (linear attention, RWKV-7, Gated DeltaNet) with "
                "step(), exact chunked prefill and forkable states",
    packages=["recur"],
    package_dir={"recur": "python/recur"},
    package_data={"recur": ["__init__.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("recur._recur")],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=["numpy"],
    python_requires=">=3.9",
    zip_safe=False,
)
