"""Builds the Cython extensions (kernel, real-time loop, Dynamixel codec); everything else is in pyproject.toml."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup


def extension(name: str) -> Extension:
    return Extension(
        name,
        [name.replace(".", "/") + ".pyx"],
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3", "-fno-math-errno", "-ffp-contract=off"],  # no FMA: round-off as MuJoCo
        libraries=["m"],  # current libm symbols (the compat ones take a slow path on underflow)
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


extensions = [extension("hil.kernel.core"), extension("hil.loop.rt"), extension("drivers.dynamixel.codec")]

setup(ext_modules=cythonize(extensions, language_level=3, compiler_directives={
    "boundscheck": False, "wraparound": False, "cdivision": True, "initializedcheck": False,
}))
