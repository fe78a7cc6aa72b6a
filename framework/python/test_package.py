"""The SDK as a package: typed (mypy --strict), pip-installable offline, a wheel.

These need Debian's mypy, python3-setuptools, python3-wheel, python3-pip and
python3-venv (hack/install-deps.sh); make test sets RUNPLANE_PYTHON_STRICT=1 so
that a missing one fails instead of skipping.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
STRICT = os.environ.get("RUNPLANE_PYTHON_STRICT") == "1"


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        if STRICT:
            raise AssertionError(f"python module {module} missing: run hack/install-deps.sh")
        raise unittest.SkipTest(f"{module} not installed")


def source_copy(tc: unittest.TestCase) -> str:
    """The package's files in a temp dir: pip builds in tree (build/, *.egg-info)."""
    d = tempfile.mkdtemp(prefix="rpsrc")
    tc.addCleanup(shutil.rmtree, d, True)
    dst = os.path.join(d, "python")
    shutil.copytree(HERE, dst, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".mypy_cache"))
    return dst


def run(tc: unittest.TestCase, *cmd: str, cwd: str = HERE) -> str:
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    tc.assertEqual(p.returncode, 0, f"{' '.join(cmd)}:\n{p.stdout}")
    return p.stdout


class TestPackage(unittest.TestCase):
    def tmp(self) -> str:
        d = tempfile.mkdtemp(prefix="rppkg")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_mypy_strict(self) -> None:
        need("mypy")
        # The FastAPI example is left out: checking FastAPI's own stubs costs 10 s of CPU.
        # examples/streamer.py: typed generator handlers given to rf.handler, serve and asgi_app.
        targets = ["runplane_framework", "echo.py", "examples/predictor.py", "examples/streamer.py"]
        out = run(self, sys.executable, "-m", "mypy", "--strict", "--cache-dir=/dev/null", *targets)
        self.assertIn("Success: no issues found", out)

    def test_pip_install_offline(self) -> None:
        """pip install --no-build-isolation ./framework/python into a venv, no index."""
        need("pip")
        need("setuptools")
        need("wheel")  # setuptools < 70 builds wheels with it
        need("venv")
        venv = os.path.join(self.tmp(), "venv")
        # --system-site-packages: the build backend (Debian's setuptools) comes from the system.
        run(self, sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv)
        py = os.path.join(venv, "bin", "python")
        run(self, py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "--quiet",
            source_copy(self), cwd=self.tmp())
        out = run(self, py, "-c", "import runplane_framework as rf, os; "
                  "print(rf.__version__, os.path.dirname(rf.__file__), "
                  "os.path.exists(os.path.join(os.path.dirname(rf.__file__), 'py.typed')))", cwd=self.tmp())
        version, where, typed = out.split()
        self.assertEqual(version, "0.2.0")
        self.assertTrue(where.startswith(venv), f"imported from {where}, not the venv")
        self.assertEqual(typed, "True", "py.typed not installed")

    def test_wheel(self) -> None:
        need("pip")
        need("wheel")
        out_dir = self.tmp()
        run(self, sys.executable, "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps",
            "--quiet", "-w", out_dir, source_copy(self), cwd=self.tmp())
        wheels = glob.glob(os.path.join(out_dir, "runplane_framework-0.2.0-py3-none-any.whl"))
        self.assertEqual(len(wheels), 1, os.listdir(out_dir))
        names = set(zipfile.ZipFile(wheels[0]).namelist())
        for want in ("runplane_framework/__init__.py", "runplane_framework/py.typed", "runplane_framework/_asgi.py"):
            self.assertIn(want, names)
        self.assertFalse([n for n in names if n.startswith(("examples/", "test_"))], "tests or examples in the wheel")


if __name__ == "__main__":
    unittest.main()
