package fuzz

import (
	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/oracle/x86cpu"
)

// ErrNotSupported is returned (wrapped) when an oracle needs a platform or
// a CPU feature that this machine or build does not have: the x86-64
// oracles outside Linux/amd64, or a CPU whose vendor is not characterised.
var ErrNotSupported = x86cpu.ErrNotSupported

// HostVendor returns the vendor whose rules the host CPU follows, for the
// Vendor of the x86-64 campaigns. It returns an error wrapping
// ErrNotSupported for a vendor the oracles cannot judge (Centaur,
// Zhaoxin) or when the CPU cannot be read.
func HostVendor() (decode.Vendor, error) { return x86cpu.HostVendor() }

// The x86-64 emulator campaign.
type (
	// EmuOracle runs batches of emulator cases on the host CPU, in a child
	// process. It is an EmuRunner; Close releases it.
	EmuOracle = x86cpu.EmuOracle
	// EmuRunner runs cases on a CPU; EmuOracle does it on the host.
	EmuRunner = x86cpu.EmuRunner
	// EmuCampaign is a differential campaign of the x86-64 emulator
	// against a CPU; its fields are the options, Run runs it.
	EmuCampaign = x86cpu.EmuCampaign
	// EmuReport sums up an EmuCampaign.
	EmuReport = x86cpu.EmuReport
	// EmuClassReport counts the cases of one generator class.
	EmuClassReport = x86cpu.EmuClassReport
	// EmuMismatch is one disagreement between the CPU and the emulator:
	// the case, both results, and the regression-vector line (Vector).
	EmuMismatch = x86cpu.EmuMismatch
	// EmuMemWord is one memory word an instruction wrote.
	EmuMemWord = x86cpu.EmuMemWord
)

// NewEmuOracle starts the host-CPU oracle of the emulator campaign. It
// needs Linux on x86-64 and ptrace; elsewhere the error wraps
// ErrNotSupported.
func NewEmuOracle() (*EmuOracle, error) { return x86cpu.NewEmuOracle() }

// EmuClasses returns the generator classes of EmuCampaign.Class.
func EmuClasses() []string { return x86cpu.EmuClasses() }

// The x86-64 relocation campaign.
type (
	// XOLX86Oracle runs original and relocated x86-64 instructions on the
	// host CPU, in a child process. It is an XOLX86Runner; Close releases
	// it.
	XOLX86Oracle = x86cpu.XOLX86Oracle
	// XOLX86Runner runs batches of relocation cases on a CPU.
	XOLX86Runner = x86cpu.XOLX86Runner
	// XOLX86Campaign is a differential campaign of relocated x86-64 copies
	// against the originals; its fields are the options, Run runs it.
	XOLX86Campaign = x86cpu.XOLX86Campaign
	// XOLX86Report sums up an XOLX86Campaign.
	XOLX86Report = x86cpu.XOLX86Report
	// XOLX86ClassReport counts the cases of one generator class.
	XOLX86ClassReport = x86cpu.XOLX86ClassReport
	// XOLX86Mismatch is one disagreement between an original and its
	// relocated copy.
	XOLX86Mismatch = x86cpu.XOLX86Mismatch
)

// NewXOLX86Oracle starts the host-CPU oracle of the relocation campaign.
// It needs Linux on x86-64 and ptrace; elsewhere the error wraps
// ErrNotSupported.
func NewXOLX86Oracle() (*XOLX86Oracle, error) { return x86cpu.NewXOLX86Oracle() }

// XOLX86Classes are the generator classes of XOLX86Campaign.Class.
var XOLX86Classes = x86cpu.XOLX86Classes
