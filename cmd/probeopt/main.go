// Command probeopt decodes instructions, scans binaries for probe sites and
// plans user-space probes on x86-64 and arm64 Linux. Run "probeopt help" for
// the commands; docs/CLI.md describes every command and flag.
package main

import "os"

//go:generate go run . gendocs ../../docs/CLI.md

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
