# Cross-compiling for 64-bit ARM Linux with Debian's toolchain (crossbuild-essential-arm64) and
# the multiarch :arm64 libraries (scripts/debian_packages.sh arm). Tests run under qemu-user
# (CMAKE_CROSSCOMPILING_EMULATOR), so ctest and gtest discovery work as on a native build.
# Used by scripts/arm_check.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Debian keeps the :arm64 libraries and their CMake / pkg-config files under
# /usr/lib/aarch64-linux-gnu and shares /usr/include: the architecture directory, not a sysroot,
# is what keeps find_package from picking the build machine's x86-64 copies.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

# qemu's default CPU model is "max" (every extension it emulates, SVE and SVE2 included). The
# programs run on the :arm64 C library that the multiarch packages install (/lib/ld-linux-aarch64.so.1
# and /lib/aarch64-linux-gnu), the one their other libraries come from: `-L /usr/aarch64-linux-gnu`
# would pair the cross toolchain's loader with that C library, and the first new thread never
# starts.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
