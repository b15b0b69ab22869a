# BT_ENABLE_SANITIZERS
# --------------------
# --enable-sanitizers: build everything (library, programs, tests) with
# AddressSanitizer and UndefinedBehaviorSanitizer; undefined behaviour
# aborts (-fno-sanitize-recover) so it fails the test that meets it. Off by
# default; fails when asked for and the compiler cannot link with the
# flags. Results only in BT_SAN_CFLAGS (compile and link flags) and
# bt_sanitizers (yes/no).
AC_DEFUN([BT_ENABLE_SANITIZERS], [
AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers],
        [build with AddressSanitizer and UndefinedBehaviorSanitizer (default: no)])],
    [], [enable_sanitizers=no])
BT_SAN_CFLAGS=""
bt_sanitizers=no
AS_IF([test "x$enable_sanitizers" = xyes], [
    bt_san_flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    AX_CHECK_LINK_FLAG([$bt_san_flags], [BT_SAN_CFLAGS="$bt_san_flags"; bt_sanitizers=yes],
        [AC_MSG_ERROR([--enable-sanitizers: $CC cannot link with $bt_san_flags (install libasan and libubsan: scripts/install-deps)])])
], [test "x$enable_sanitizers" != xno], [
    AC_MSG_ERROR([--enable-sanitizers=$enable_sanitizers: expected yes or no])
])
AC_SUBST([BT_SAN_CFLAGS])
])

# BT_ENABLE_FUZZ
# --------------
# --enable-fuzz: build the libFuzzer targets in tests/fuzz/ (make
# fuzz-targets, run by scripts/fuzz). They need a compiler that knows
# -fsanitize=fuzzer: Debian's clang, through the MPI wrapper with
# OMPI_CC=clang. The targets and the library sources they use are built
# with BT_FUZZ_CFLAGS (coverage instrumentation, ASan, UBSan aborting on
# undefined behaviour) and linked with BT_FUZZ_LDFLAGS (libFuzzer's main);
# the rest of the build is unchanged. Sets the BT_FUZZ conditional.
AC_DEFUN([BT_ENABLE_FUZZ], [
AC_ARG_ENABLE([fuzz],
    [AS_HELP_STRING([--enable-fuzz],
        [build the libFuzzer targets in tests/fuzz (needs clang, e.g. OMPI_CC=clang; default: no)])],
    [], [enable_fuzz=no])
BT_FUZZ_CFLAGS=""
BT_FUZZ_LDFLAGS=""
bt_fuzz=no
AS_IF([test "x$enable_fuzz" = xyes], [
    bt_fuzz_san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    AC_MSG_CHECKING([whether $CC builds libFuzzer targets (-fsanitize=fuzzer)])
    bt_fuzz_save_CFLAGS=$CFLAGS
    CFLAGS="$CFLAGS -fsanitize=fuzzer $bt_fuzz_san"
    AC_LINK_IFELSE([AC_LANG_SOURCE([[
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return data != NULL && size > 1000000 ? 1 : 0;
}
]])], [bt_fuzz=yes], [bt_fuzz=no])
    CFLAGS=$bt_fuzz_save_CFLAGS
    AC_MSG_RESULT([$bt_fuzz])
    AS_IF([test "x$bt_fuzz" != xyes],
        [AC_MSG_ERROR([--enable-fuzz: $CC cannot link with -fsanitize=fuzzer; use clang (Debian: clang and libclang-rt-14-dev, scripts/install-deps), e.g. OMPI_CC=clang ../configure --enable-fuzz])])
    BT_FUZZ_CFLAGS="-fsanitize=fuzzer-no-link $bt_fuzz_san"
    BT_FUZZ_LDFLAGS="-fsanitize=fuzzer $bt_fuzz_san"
], [test "x$enable_fuzz" != xno], [
    AC_MSG_ERROR([--enable-fuzz=$enable_fuzz: expected yes or no])
])
AC_SUBST([BT_FUZZ_CFLAGS])
AC_SUBST([BT_FUZZ_LDFLAGS])
AM_CONDITIONAL([BT_FUZZ], [test "x$bt_fuzz" = xyes])
])
