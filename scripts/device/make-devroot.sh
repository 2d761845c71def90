#!/usr/bin/env bash
# Builds .devroot/: the Debian 12 build dependencies of pagedkv packed for a
# machine that lacks them and cannot fetch them (the remote GPU machine: an
# Ubuntu CUDA image with cmake, ninja, g++, nvcc and pkg-config but no network
# and, among others, no libicu-dev, libpcre2-dev or libcpp-httplib-dev).
#
# Run here, where Debian's mirror is reachable (root, for apt-get update):
#     bash scripts/device/make-devroot.sh        # writes .devroot/ (git-ignored)
# It `apt-get download`s the -dev packages of scripts/install-deps.sh that the
# build links or includes, plus the runtime libraries they need, unpacks them
# with `dpkg -x` into a staging tree `pagedkv-devroot/usr/...`, drops docs, man
# pages, tools and static libraries that have a shared twin, points every
# pkg-config file (and the few absolute paths in CMake package files) at
# /opt/pagedkv-devroot/usr, and writes
#     .devroot/devroot.tar.xz   the tree; `tar -C /opt -xJf` makes /opt/pagedkv-devroot
#     .devroot/setup.sh         to `source` on the remote machine
# On the remote machine, from the repo root (carry `.devroot` along: it is ignored):
#     source .devroot/setup.sh && cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release \
#         -DPAGEDKV_BUILD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-dev ...
# (source it in the shell that builds, never in a pipeline such as `source ... | tee`:
# that runs it in a subshell and the exports are lost).
# setup.sh unpacks the tarball into /opt/pagedkv-devroot (once; again only when
# the tarball changed) and exports CMAKE_PREFIX_PATH and PKG_CONFIG_PATH, so the
# devroot's packages win over any copy in /usr, and LD_LIBRARY_PATH to a folder
# that links only the shared libraries the machine itself lacks, and OpenSSL's
# pair (its own zlib, brotli... stay in use for every other program). Nothing
# under /usr is touched.
#
# Options: --refresh  run `apt-get update` first (otherwise only when apt knows
#                     none of the packages yet).
set -euo pipefail

ROOT_NAME=pagedkv-devroot
DEST=/opt/$ROOT_NAME            # where the tree lives on the remote machine
MULTIARCH=x86_64-linux-gnu      # the remote machine is x86-64

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$repo/.devroot

# What the build needs (CMakeLists.txt: find_package / pkg_check_modules) and the
# runtime libraries those -dev packages depend on.
PACKAGES=(
  libicu-dev libicu72                                   # icu-uc, icu-i18n
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  nlohmann-json3-dev                                    # header-only, CMake package
  libcpp-httplib-dev libcpp-httplib0.11                 # src/server (pkg-config cpp-httplib)
  libssl-dev libssl3                                    # OpenSSL (and httplib's TLS)
  zlib1g-dev zlib1g                                     # httplib's gzip
  libbrotli-dev libbrotli1                              # httplib's brotli
  libcli11-dev                                          # header-only, CMake package
  libgtest-dev libgmock-dev                             # static only in Debian 12
  libbenchmark-dev libbenchmark1debian                  # PAGEDKV_BUILD_BENCH
)
# Dependencies deliberately left out: the remote machine's own C/C++ runtime and
# headers serve, and the rest is not used by the build.
NOT_SHIPPED=(
  libc6 libc6-dev libc-dev libgcc-s1 libstdc++6         # the machine's own toolchain
  googletest                                            # GoogleTest's sources (/usr/src)
  icu-devtools                                          # genrb, icupkg...: unused
)

if [[ "${1:-}" == --refresh ]] || ! apt-cache show libicu-dev >/dev/null 2>&1; then
  apt-get update -qq
fi

# Every Depends/Pre-Depends of what we ship must be shipped or listed above, so a
# new dependency in a Debian update fails here rather than on the remote machine.
in_list() { local x=$1; shift; local y; for y in "$@"; do [[ "$x" == "$y" ]] && return 0; done; return 1; }
missing_deps=()
for p in "${PACKAGES[@]}"; do
  while read -r dep; do
    in_list "$dep" "${PACKAGES[@]}" "${NOT_SHIPPED[@]}" || missing_deps+=("$p -> $dep")
  done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
             --no-replaces --no-enhances "$p" |
           awk '$1 ~ /^\|?(Pre)?Depends:$/ { gsub(/[<>]/, "", $2); print $2 }')
done
if [[ ${#missing_deps[@]} -gt 0 ]]; then
  printf 'make-devroot: dependency neither shipped nor in NOT_SHIPPED: %s\n' "${missing_deps[@]}" >&2
  exit 1
fi

work=$(mktemp -d /tmp/make-devroot.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/stage"
chmod 755 "$work" && chmod 1777 "$work/debs"   # apt's _apt user writes the downloads
stage=$work/stage/$ROOT_NAME

echo "make-devroot: downloading ${#PACKAGES[@]} packages" >&2
(cd "$work/debs" && apt-get download -q "${PACKAGES[@]}" >/dev/null)

for deb in "$work"/debs/*.deb; do
  dpkg -x "$deb" "$stage"
  dpkg-deb -f "$deb" Package Version | paste -sd= >>"$work/manifest"
done
sort -o "$work/manifest" "$work/manifest"

# Debian's merged /usr: zlib1g ships /lib/<arch>/libz.so.1; fold /lib into usr/lib.
for d in lib bin sbin; do
  if [[ -d "$stage/$d" && ! -L "$stage/$d" ]]; then
    mkdir -p "$stage/usr/$d"
    cp -a "$stage/$d/." "$stage/usr/$d/"
    rm -rf "${stage:?}/$d"
  fi
done
# Absolute symlinks (libz.so -> /lib/...) would point outside the tree: make them relative.
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  [[ "$target" == /* ]] || continue
  case "$target" in /lib/* | /bin/* | /sbin/*) target=/usr$target ;; esac
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$stage$target")" "$link"
done < <(find "$stage" -type l -print0)

# Drop what the build does not use.
libdir=$stage/usr/lib/$MULTIARCH
rm -rf "$stage"/usr/share/{doc,man,lintian,bug,icu} "$stage"/usr/src "$stage"/usr/bin "$stage"/usr/sbin \
       "$libdir"/engines-3 "$libdir"/ossl-modules "$libdir"/icu
rm -f "$libdir"/libicutest.* "$libdir"/libicutu.*         # ICU's test and tool libraries
for a in "$libdir"/*.a; do                                 # static libs with a shared twin
  [[ -e "${a%.a}.so" ]] && rm -f "$a"
done
find "$stage" -depth -type d -empty -delete

# Point pkg-config and CMake package files at $DEST/usr. Most CMake files find their
# prefix relative to themselves; GTest's and benchmark's also compare against their
# absolute install path, rewritten too so both ways agree. Comment lines are left.
mapfile -d '' meta < <(find "$stage" -type f \( -name '*.pc' -o -name '*.cmake' \) -print0)
perl -pi -e 'next if /^\s*#/; s#(?<!\Q'"$DEST"'\E)/usr(?=[/\s"'\'']|$)#'"$DEST"'/usr#g' "${meta[@]}"
if leftover=$(grep -nP '^(?!\s*#).*(?<!\Q'"$DEST"'\E)/usr(?=[/\s"]|$)' "${meta[@]}"); then
  echo "make-devroot: absolute /usr paths left in package files:" >&2
  echo "$leftover" >&2
  exit 1
fi
for pc in "$libdir"/pkgconfig/*.pc "$stage"/usr/share/pkgconfig/*.pc; do
  grep -q "$DEST/usr" "$pc" || { echo "make-devroot: $pc does not name $DEST/usr" >&2; exit 1; }
done

# The sonames of the shared libraries, for setup.sh's LD_LIBRARY_PATH folder.
sonames=()
while IFS= read -r -d '' so; do
  s=$(objdump -p "$so" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
  [[ -n "$s" && -e "$libdir/$s" ]] && sonames+=("$s")
done < <(find "$libdir" -maxdepth 1 -type f -name '*.so*' -print0)
mapfile -t sonames < <(printf '%s\n' "${sonames[@]}" | sort -u)

cp "$work/manifest" "$stage/MANIFEST"
# The tree's id (a hash of its contents): setup.sh unpacks again when it differs.
pack() {
  tar -C "$work/stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$ROOT_NAME"
}
id=$(pack | sha256sum | cut -c1-16)
echo "$id" >"$stage/.devroot-id"

mkdir -p "$out"
rm -f "$out/devroot.tar.xz" "$out/setup.sh"
pack | xz -9e -T1 >"$out/devroot.tar.xz.tmp"
mv "$out/devroot.tar.xz.tmp" "$out/devroot.tar.xz"
cp "$work/manifest" "$out/MANIFEST"

cat >"$out/setup.sh" <<EOF
# Generated by scripts/device/make-devroot.sh: do not edit. Source it, e.g. from
# the repo root:  source .devroot/setup.sh
# Unpacks devroot.tar.xz (beside this file) into $DEST when that is missing or
# from another tarball, then exports CMAKE_PREFIX_PATH and PKG_CONFIG_PATH (the
# devroot's packages win over /usr's) and LD_LIBRARY_PATH to a folder linking the
# devroot libraries whose soname this machine's ldconfig does not know.
# Touches nothing outside $DEST.
_pkv_dr=$DEST
_pkv_dr_id=$id
_pkv_dr_tar="\$(cd "\$(dirname "\${BASH_SOURCE[0]:-\$0}")" && pwd)/devroot.tar.xz"
if [[ "\$(cat "\$_pkv_dr/.devroot-id" 2>/dev/null)" != "\$_pkv_dr_id" ]]; then
  echo "devroot: unpacking \$_pkv_dr_tar into \$_pkv_dr" >&2
  mkdir -p "\$(dirname "\$_pkv_dr")" &&
    _pkv_dr_tmp=\$(mktemp -d "\$(dirname "\$_pkv_dr")/.${ROOT_NAME}.XXXXXX") &&
    tar -C "\$_pkv_dr_tmp" -xJf "\$_pkv_dr_tar" &&
    rm -rf "\$_pkv_dr" &&
    mv "\$_pkv_dr_tmp/$ROOT_NAME" "\$_pkv_dr" &&
    rmdir "\$_pkv_dr_tmp" ||
    { echo "devroot: could not unpack into \$_pkv_dr" >&2; return 1 2>/dev/null || exit 1; }
fi
# Shared libraries this machine lacks (ICU 72, httplib, benchmark...); its own
# zlib, brotli, pcre2-8 stay in use. OpenSSL's pair always comes from the devroot:
# binaries that link libcrypto find the devroot's through their build RUNPATH, so
# libssl (loaded for httplib) must be its twin, not the machine's own 3.0.x.
rm -rf "\$_pkv_dr/ld" && mkdir -p "\$_pkv_dr/ld"
_pkv_dr_known=\$(ldconfig -p 2>/dev/null | awk '{ print \$1 }' | grep -vxE 'libssl\.so\.3|libcrypto\.so\.3')
for _pkv_s in ${sonames[*]}; do
  grep -qxF "\$_pkv_s" <<<"\$_pkv_dr_known" ||
    ln -s "../usr/lib/$MULTIARCH/\$_pkv_s" "\$_pkv_dr/ld/\$_pkv_s"
done
export CMAKE_PREFIX_PATH="\$_pkv_dr/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export PKG_CONFIG_PATH="\$_pkv_dr/usr/lib/$MULTIARCH/pkgconfig:\$_pkv_dr/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="\$_pkv_dr/ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "devroot: \$_pkv_dr ready (\$(ls "\$_pkv_dr/ld" | wc -l) libraries on LD_LIBRARY_PATH)" >&2
unset _pkv_dr _pkv_dr_id _pkv_dr_tar _pkv_dr_tmp _pkv_dr_known _pkv_s
EOF

size=$(stat -c %s "$out/devroot.tar.xz")
echo "make-devroot: $out/devroot.tar.xz: $(( (size + 524288) / 1048576 )) MiB ($size bytes)," \
     "$(wc -l <"$work/manifest") packages, id $id"
