# BT_CHECK_CUDA
# -------------
# --with-cuda[=DIR]: off unless asked. When asked, finds nvcc (DIR/bin, else
# PATH, else /usr/local/cuda/bin) and the CUDA runtime (cuda_runtime.h and
# libcudart), and fails if either is missing. Links against the driver stubs
# when present so a machine without a GPU still links. Results only in
# CUDA_CPPFLAGS, CUDA_LDFLAGS, CUDA_LIBS, NVCC, NVCCFLAGS and the
# HAVE_CUDA conditional; CFLAGS are never passed to nvcc.
AC_DEFUN([BT_CHECK_CUDA], [
AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
        [enable CUDA, optionally from toolkit DIR (default: no)])],
    [], [with_cuda=no])
AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST],
        [CUDA architectures to build, comma-separated (default: 90 and 121 where nvcc has them)])],
    [], [with_cuda_arch=""])
AC_ARG_VAR([NVCC], [CUDA compiler])
AC_ARG_VAR([NVCCFLAGS], [flags for NVCC (CFLAGS are not passed to it)])
bt_have_cuda=no
AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test "x$with_cuda" = xyes], [bt_cuda_dir=""], [bt_cuda_dir="$with_cuda"])
    AS_IF([test -n "$bt_cuda_dir" && test ! -d "$bt_cuda_dir"],
        [AC_MSG_ERROR([--with-cuda=$bt_cuda_dir: no such directory])])
    bt_cuda_path="$PATH:/usr/local/cuda/bin"
    AS_IF([test -n "$bt_cuda_dir"], [bt_cuda_path="$bt_cuda_dir/bin"])
    AC_PATH_PROG([NVCC], [nvcc], [], [$bt_cuda_path])
    AS_IF([test -z "$NVCC"],
        [AC_MSG_ERROR([--with-cuda: nvcc not found in $bt_cuda_path])])
    AS_IF([test -z "$bt_cuda_dir"],
        [bt_cuda_dir=`AS_DIRNAME(["$NVCC"])`; bt_cuda_dir=`AS_DIRNAME(["$bt_cuda_dir"])`])
    for bt_lib in lib64 lib targets/x86_64-linux/lib; do
        AS_IF([test -d "$bt_cuda_dir/$bt_lib"], [CUDA_LDFLAGS="-L$bt_cuda_dir/$bt_lib"; break])
    done
    AS_IF([test -d "$bt_cuda_dir/$bt_lib/stubs"],
        [CUDA_LDFLAGS="$CUDA_LDFLAGS -L$bt_cuda_dir/$bt_lib/stubs"])
    CUDA_CPPFLAGS="-I$bt_cuda_dir/include"
    bt_save_CPPFLAGS="$CPPFLAGS"
    bt_save_LDFLAGS="$LDFLAGS"
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
    AC_CHECK_HEADER([cuda_runtime.h], [],
        [AC_MSG_ERROR([--with-cuda: cuda_runtime.h not found under $bt_cuda_dir/include])])
    AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [CUDA_LIBS="-lcudart"],
        [AC_MSG_ERROR([--with-cuda: libcudart not found (LDFLAGS $CUDA_LDFLAGS)])])
    # The static runtime when there is one: the programs then find the
    # driver at run time (a machine without one reports "no CUDA device")
    # and need no library path for the runtime.
    AS_IF([test -f "$bt_cuda_dir/$bt_lib/libcudart_static.a"],
        [CUDA_LIBS="-lcudart_static -ldl -lrt -lpthread"])
    CUDA_LIBS="$CUDA_LIBS -lstdc++"
    CPPFLAGS="$bt_save_CPPFLAGS"
    LDFLAGS="$bt_save_LDFLAGS"
    bt_have_cuda=yes
    AC_DEFINE([BT_HAVE_CUDA], [1], [Define to 1 when built with CUDA])
    # Targets: sm_90 (H100/H200) and sm_121 (GB10, DGX Spark) where nvcc
    # lists them, as machine code, plus PTX of the newest for later GPUs;
    # --with-cuda-arch=LIST (e.g. 90,121) overrides.
    AC_MSG_CHECKING([for the CUDA architectures to build])
    bt_nvcc_archs=`"$NVCC" --list-gpu-arch 2>/dev/null | tr '\n' ' '`
    AS_IF([test "x$with_cuda_arch" = x || test "x$with_cuda_arch" = xyes],
        [with_cuda_arch=""
         for bt_a in 90 121; do
             AS_CASE([" $bt_nvcc_archs "], [*" compute_$bt_a "*],
                 [with_cuda_arch="$with_cuda_arch${with_cuda_arch:+,}$bt_a"])
         done])
    AS_IF([test -z "$with_cuda_arch"],
        [AC_MSG_ERROR([--with-cuda: $NVCC lists neither compute_90 nor compute_121 (it lists: $bt_nvcc_archs); name targets with --with-cuda-arch])])
    BT_NVCC_ARCH=""
    bt_last=""
    for bt_a in `echo "$with_cuda_arch" | tr ',' ' '`; do
        AS_CASE([$bt_a], [*[[!0-9]]*|""],
            [AC_MSG_ERROR([--with-cuda-arch: '$bt_a' is not an architecture number like 90 or 121])])
        BT_NVCC_ARCH="$BT_NVCC_ARCH -gencode arch=compute_$bt_a,code=sm_$bt_a"
        bt_last=$bt_a
    done
    BT_NVCC_ARCH="$BT_NVCC_ARCH -gencode arch=compute_$bt_last,code=compute_$bt_last"
    AC_MSG_RESULT([$with_cuda_arch (+ PTX $bt_last)])
])
AC_SUBST([BT_NVCC_ARCH])
AC_SUBST([CUDA_CPPFLAGS])
AC_SUBST([CUDA_LDFLAGS])
AC_SUBST([CUDA_LIBS])
AM_CONDITIONAL([HAVE_CUDA], [test "x$bt_have_cuda" = xyes])
])
