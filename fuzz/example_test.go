package fuzz_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/probeopt/probeopt/fuzz"
)

// The x86-64 emulator against the host CPU: 100,000 cases from seed 1.
func ExampleEmuCampaign() {
	vendor, err := fuzz.HostVendor()
	if err != nil {
		log.Fatal(err)
	}
	oracle, err := fuzz.NewEmuOracle()
	if errors.Is(err, fuzz.ErrNotSupported) {
		return // not Linux on x86-64
	} else if err != nil {
		log.Fatal(err)
	}
	defer oracle.Close()
	c := fuzz.EmuCampaign{
		Cases:  100000,
		Seed:   1,
		Vendor: vendor,
		OnMismatch: func(m *fuzz.EmuMismatch) bool {
			fmt.Println(m)
			fmt.Println(m.Vector())
			return true
		},
	}
	rep, err := c.Run(oracle)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d cases, %d mismatches\n", rep.Cases, rep.Mismatches)
}

// The arm64 emulator against qemu-aarch64.
func ExampleARM64EmuCampaign() {
	q, err := fuzz.StartQEMU(fuzz.NewARM64Image(1), nil)
	if errors.Is(err, fuzz.ErrNoToolchain) {
		return // qemu-aarch64 or aarch64-linux-gnu-gcc missing
	} else if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	c := fuzz.ARM64EmuCampaign{Cases: 100000, Seed: 1}
	rep, err := c.Run(q)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d mismatches\n", rep.Mismatches)
}
