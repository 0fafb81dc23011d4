//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "guestinit: the /init of the arm64 Linux guest; it runs on Linux only")
	os.Exit(2)
}
