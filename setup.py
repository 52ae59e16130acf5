"""Builds the Cython extensions (kernel, real-time loop); everything else is in pyproject.toml."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup


def extension(name: str, depends: tuple[str, ...] = ()) -> Extension:
    return Extension(
        name,
        [name.replace(".", "/") + ".pyx"],
        depends=list(depends),
        include_dirs=[numpy.get_include()],
        # no FMA contraction: round-off as MuJoCo (only vmath.h's AVX2/AVX-512 functions contract, per
        # function attribute); -fopenmp-simd: vmath.h's `omp simd` loops, no OpenMP runtime
        extra_compile_args=["-O3", "-fno-math-errno", "-ffp-contract=off", "-fopenmp-simd"],
        libraries=["m"],  # current libm symbols (the compat ones take a slow path on underflow)
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


extensions = [extension("hil.kernel.core", depends=("hil/kernel/vmath.h",)), extension("hil.loop.rt")]

setup(ext_modules=cythonize(extensions, language_level=3, compiler_directives={
    "boundscheck": False, "wraparound": False, "cdivision": True, "initializedcheck": False,
}))
