"""Builds the Cython extensions (kernel, real-time loop, robot engine, Dynamixel and SLCAN codecs, Dynamixel
firmware); the rest is in pyproject.toml."""

import os
import platform
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# glibc's vector math library (x86-64 vector ABI), used by hil/kernel/vmath.h when the CPU has AVX2
LIBMVEC = sys.platform == "linux" and platform.machine() == "x86_64" and platform.libc_ver()[0] == "glibc"


def extension(name: str, depends: tuple[str, ...] = (), flags: tuple[str, ...] = ()) -> Extension:
    return Extension(
        name,
        [name.replace(".", "/") + ".pyx"],
        depends=list(depends),
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-O3", "-fno-math-errno", "-ffp-contract=off", *flags],  # no FMA: round-off as MuJoCo
        # current libm symbols (the compat ones take a slow path on underflow); libmvec: vmath.h
        libraries=["m", "mvec"] if LIBMVEC else ["m"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


def robot_extension() -> Extension:
    """hil.robot.engine: calls MuJoCo's C API (the `mujoco` wheel ships include/ and libmujoco, which
    `import mujoco` loads before the engine is imported: hil/robot/__init__.py)."""
    import mujoco

    here = os.path.dirname(mujoco.__file__)
    lib = next(f for f in sorted(os.listdir(here)) if f.startswith("libmujoco.so"))
    ext = extension("hil.robot.engine", depends=(*KERNEL_HEADERS, "hil/kernel/core.pxd"))
    ext.include_dirs += [os.path.join(here, "include"), "hil/kernel"]
    ext.extra_link_args = [os.path.join(here, lib)]
    return ext


KERNEL_HEADERS = tuple(f"hil/kernel/{h}.h" for h in ("vmath", "vexp", "noise", "isa", "plan", "select", "args", "sense",
                                                     "law", "motor", "load"))

# the kernel's lane loops stay loops: GCC -O3 turns a loop that zeroes a few padding lanes into a
# memset call (rep stos, or a call with vzeroupper), dozens of cycles for 3 lanes of a lone actuator
KERNEL_FLAGS = ("-fno-tree-loop-distribute-patterns",)

extensions = [extension("hil.kernel.core", depends=KERNEL_HEADERS, flags=KERNEL_FLAGS),
              extension("hil.loop.rt"), extension("bench.zmq_receiver"),
              extension("drivers.dynamixel.codec"), extension("drivers.can.slcan_codec"),
              extension("drivers.dynamixel.bus"), extension("firmware_models.dynamixel.present"),
              extension("firmware_models.dynamixel.servo_core"), extension("firmware_models.dynamixel.write_checks"),
              extension("firmware_models.dynamixel.joint_link"), robot_extension()]



class ParallelBuildExt(build_ext):
    """Compiles the extensions on every core (pip's editable install passes no --parallel)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


setup(cmdclass={"build_ext": ParallelBuildExt},
      ext_modules=cythonize(extensions, nthreads=os.cpu_count() or 1, language_level=3, compiler_directives={
    "boundscheck": False, "wraparound": False, "cdivision": True, "initializedcheck": False,
}))
