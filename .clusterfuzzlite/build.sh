#!/bin/bash -eu
# Builds probeopt's Go fuzz targets as libFuzzer targets for ClusterFuzzLite
# and OSS-Fuzz. It runs inside the image of .clusterfuzzlite/Dockerfile, with
# $SRC, $OUT, $SANITIZER and the compile_native_go_fuzzer helpers of the
# OSS-Fuzz base-builder image. docs/FUZZING.md says which targets are here
# and why the differential ones are not.

cd "$SRC/probeopt"

tmpdir=$(mktemp -d)
hidden=()
restore_hidden() {
	local f
	for f in "${hidden[@]:+${hidden[@]}}"; do
		mv "$f.hidden-for-fuzz-build" "$f"
	done
	hidden=()
}
trap 'restore_hidden; rm -rf "$tmpdir"' EXIT

# The Go release go.mod asks for. When the image's Go is older, Go fetches
# that release into the module cache, whose files cannot be overlaid (the
# builder overlays the standard library's testing/fuzz.go): use a writable
# copy instead.
export GOTOOLCHAIN=auto
goroot=$(go env GOROOT)
if [[ "$goroot" == "$(go env GOMODCACHE)"* ]]; then
	cp -r "$goroot/." "$tmpdir/goroot"
	chmod -R u+rwX "$tmpdir/goroot"
	export GOROOT="$tmpdir/goroot"
	export PATH="$GOROOT/bin:$PATH"
fi
export GOTOOLCHAIN=local
go version

# Rebuild the builder (and the seed-corpus converter) with this release, so
# that its view of the sources matches the compiler's, and give the module
# the builder's testing package.
ref=$(git -C "$SRC/go-118-fuzz-build" rev-parse HEAD)
mkdir -p "$tmpdir/bin"
(cd "$SRC/go-118-fuzz-build" && GOFLAGS=-mod=mod go build -o "$tmpdir/bin/go-118-fuzz-build_v2" .)
if [ -d "$SRC/go-118-fuzz-build/cmd/addStdLibCorpusToFuzzer" ]; then
	(cd "$SRC/go-118-fuzz-build/cmd/addStdLibCorpusToFuzzer" &&
		GOFLAGS=-mod=mod go build -o "$tmpdir/bin/addStdLibCorpusToFuzzer" .)
fi
export PATH="$tmpdir/bin:$PATH"
GOFLAGS=-mod=mod go get "github.com/AdamKorcz/go-118-fuzz-build/testing@$ref"

# The v2 helper builds a target together with the test files of its
# package (they hold helpers); fall back to the first helper on images
# that lack it.
native=compile_native_go_fuzzer_v2
command -v "$native" >/dev/null || native=compile_native_go_fuzzer

# build_fuzzer PACKAGE FUNCTION NAME builds one target into $OUT/NAME, and
# its committed corpus (PACKAGE_DIR/testdata/fuzz/FUNCTION, Go's format)
# into $OUT/NAME_seed_corpus.zip when the converter is there. The files of
# the package's external test package (package foo_test) would collide with
# the package once the builder renames test files, and a target never uses
# them: they are moved aside for the build.
build_fuzzer() {
	local pkg=$1 function=$2 name=$3 dir rel
	dir=$(go list -tags gofuzz -f '{{.Dir}}' "$pkg")
	while IFS= read -r rel; do
		[ -n "$rel" ] || continue
		mv "$dir/$rel" "$dir/$rel.hidden-for-fuzz-build"
		hidden+=("$dir/$rel")
	done < <(go list -tags gofuzz -f '{{range .XTestGoFiles}}{{.}}{{"\n"}}{{end}}' "$pkg")
	"$native" "$pkg" "$function" "$name"
	restore_hidden
	test -x "$OUT/$name" || { echo "build.sh: $name was not built" >&2; exit 1; }
	if [ -d "$dir/testdata/fuzz/$function" ] && command -v addStdLibCorpusToFuzzer >/dev/null; then
		addStdLibCorpusToFuzzer -dir "$dir/testdata/fuzz/$function" -fuzzer_name "$name"
	fi
}

# wrap_external PACKAGE WRAPPER [FILE...] copies the external test package
# of PACKAGE (its files in "package foo_test", which hold the targets and
# their helpers), or only the FILEs of it when given, into a package of its
# own, internal/ossfuzz/WRAPPER, where the builder can find them, with the
# committed corpora. They use the package under test only through its
# exported API, so nothing else changes.
wrap_external() {
	local pkg=$1 name=$2 dir=internal/ossfuzz/$2 src rel
	shift 2
	src=$(go list -tags gofuzz -f '{{.Dir}}' "$pkg")
	mkdir -p "$dir"
	printf '// Package %s holds fuzz targets copied for the OSS-Fuzz build.\npackage %s\n' "$name" "$name" >"$dir/doc.go"
	while IFS= read -r rel; do
		[ -n "$rel" ] || continue
		[ -f "$src/$rel" ] || { echo "build.sh: no file $src/$rel" >&2; exit 1; }
		sed "s/^package [a-z0-9_]*_test\$/package $name/" "$src/$rel" >"$dir/$rel"
		grep -q "^package $name\$" "$dir/$rel" || { echo "build.sh: no package clause in $src/$rel" >&2; exit 1; }
	done < <(if [ $# -gt 0 ]; then printf '%s\n' "$@"; else go list -tags gofuzz -f '{{range .XTestGoFiles}}{{.}}{{"\n"}}{{end}}' "$pkg"; fi)
	if [ -d "$src/testdata/fuzz" ]; then
		mkdir -p "$dir/testdata"
		cp -r "$src/testdata/fuzz" "$dir/testdata/"
	fi
}

mod=$(go list -m)

# decode: x86-64 and arm64 instruction decoding.
build_fuzzer "$mod/decode" FuzzDecodeX86 decode_x86
build_fuzzer "$mod/decode" FuzzDecodeARM64 decode_arm64

# emulate: the arm64 emulator's invariants (the x86-64 and arm64
# differential targets of package fuzz need a CPU oracle or qemu-user and
# are run with go test -fuzz and probeopt fuzz instead).
build_fuzzer "$mod/emulate" FuzzARM64Step emulate_arm64_step

# xol: arm64 relocation, checked by emulating the original and the copy;
# x86-64 relocation (its targets live in the external test package).
build_fuzzer "$mod/xol" FuzzRelocateARM64 xol_relocate_arm64
wrap_external "$mod/xol" xolfuzz
build_fuzzer "$mod/internal/ossfuzz/xolfuzz" FuzzRelocateX86 xol_relocate_x86

# elfscan: ELF files, USDT notes and argument specs, probe specs, and the
# edit distance behind the unknown-symbol suggestions.
build_fuzzer "$mod/elfscan" FuzzEditDistance elfscan_edit_distance
wrap_external "$mod/elfscan" elfscanfuzz
for target in NewFile:elfscan_new_file USDTNotes:elfscan_usdt_notes ParseUSDTArgs:elfscan_usdt_args ParseSpec:elfscan_spec; do
	build_fuzzer "$mod/internal/ossfuzz/elfscanfuzz" "Fuzz${target%%:*}" "${target##*:}"
done

# trampoline: x86-64 slot generation. The target lives in the external test
# package, whose other files need ptrace, a C++ fixture and packages
# internal to trampoline: only the target's file is copied.
wrap_external "$mod/trampoline" trampolinefuzz fuzz_x86_test.go
build_fuzzer "$mod/internal/ossfuzz/trampolinefuzz" FuzzGenerateX86 trampoline_generate_x86
# trampoline: arm64 slot generation (an internal test of the package).
build_fuzzer "$mod/trampoline" FuzzBuildARM64 trampoline_build_arm64
