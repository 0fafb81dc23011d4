// Package guest boots an arm64 Linux guest under qemu-system-aarch64 and
// runs one command in it: Debian's arm64 kernel (the linux-image-*-arm64
// package, installed for the arm64 architecture), an initramfs written
// on the fly with a static Go /init (internal/vm/guestinit, built by Run
// and cached), busybox's applets (busybox-static:arm64) and the arm64 C
// library (libc6:arm64), and the files the caller names in the working
// directory. The command's standard output, standard error and exit
// status come back over the serial console as wire records, so a guest
// that panics or hangs is told apart from a command that failed: QEMU
// itself exits 0 either way.
//
// It owns the machine (QEMU's flags, the kernel command line, the
// initramfs's layout) and finding its parts on the host. It does not
// build what runs in the guest (the caller cross-compiles test binaries
// and fixtures), and it downloads nothing.
//
// Tests call Need, which skips when the parts are missing and fails under
// CI; people run `go run ./internal/vm -- CMD`.
package guest
