# Cross-compiling for 64-bit ARM Linux with Debian's gcc-aarch64-linux-gnu
# (make cross-aarch64). The programs run on an ARM machine or under
# qemu-aarch64 (Debian's qemu-user; make test-aarch64). pkg-config looks only
# in the target's directories, so the x86 server libraries are never linked:
# kvbound serve is built when the aarch64 -dev packages are installed.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(KVB_CROSS_PREFIX aarch64-linux-gnu- CACHE STRING "the cross tools' prefix")
set(CMAKE_C_COMPILER ${KVB_CROSS_PREFIX}gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} /)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
