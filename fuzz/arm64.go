package fuzz

import "github.com/probeopt/probeopt/internal/oracle/qemu"

// ErrNoToolchain is returned (wrapped) by StartQEMU when qemu-aarch64 or
// the cross compiler of its harness (QEMUHarnessCC) is not on PATH.
var ErrNoToolchain = qemu.ErrNoToolchain

const (
	// QEMUHarnessCC is the compiler the qemu harness is built with.
	QEMUHarnessCC = qemu.QEMUHarnessCC
	// QEMUDefaultCPU is the -cpu option the qemu oracle runs with.
	QEMUDefaultCPU = qemu.QEMUDefaultCPU
)

// The arm64 campaigns and their oracle.
type (
	// QEMUOracle runs batches of arm64 cases under qemu-aarch64. It is an
	// ARM64Runner; Close releases it.
	QEMUOracle = qemu.QEMUOracle
	// QEMUOptions tune StartQEMU; nil means the defaults.
	QEMUOptions = qemu.QEMUOptions
	// ARM64Image is the memory image (code and data windows) the cases of
	// a QEMUOracle run in.
	ARM64Image = qemu.ARM64Image
	// ARM64Runner runs batches of arm64 cases; QEMUOracle does it under
	// qemu.
	ARM64Runner = qemu.ARM64Runner
	// ARM64EmuCampaign is a differential campaign of the arm64 emulator
	// against qemu; its fields are the options, Run runs it.
	ARM64EmuCampaign = qemu.ARM64EmuCampaign
	// ARM64XOLCampaign is a differential campaign of relocated arm64 runs
	// against the originals under qemu.
	ARM64XOLCampaign = qemu.ARM64XOLCampaign
	// ARM64Report sums up an arm64 campaign.
	ARM64Report = qemu.ARM64Report
	// ARM64ClassReport counts the cases of one class.
	ARM64ClassReport = qemu.ARM64ClassReport
	// ARM64Mismatch is one disagreement found by an arm64 campaign.
	ARM64Mismatch = qemu.ARM64Mismatch
)

// StartQEMU builds (once, cached) and starts the qemu harness with img.
// The error wraps ErrNoToolchain when a tool is missing.
func StartQEMU(img *ARM64Image, opt *QEMUOptions) (*QEMUOracle, error) {
	return qemu.StartQEMU(img, opt)
}

// NewARM64Image returns the memory image of seed.
func NewARM64Image(seed uint64) *ARM64Image { return qemu.NewARM64Image(seed) }

var (
	// ARM64EmuClasses are the classes of ARM64EmuCampaign.Class.
	ARM64EmuClasses = qemu.ARM64EmuClasses
	// ARM64XOLClasses are the classes of ARM64XOLCampaign.Class.
	ARM64XOLClasses = qemu.ARM64XOLClasses
)

// The cases a QEMUOracle runs, for a caller that builds its own (package
// trampoline's qemu test runs its slots this way).
type (
	// ARM64Case is one run: the initial state and the code words patched
	// into the image for it.
	ARM64Case = qemu.ARM64Case
	// ARM64Patch is one instruction word written into the image.
	ARM64Patch = qemu.ARM64Patch
	// ARM64Result is the final state of a run.
	ARM64Result = qemu.ARM64Result
	// ARM64SiteCase is a generated probe site: an instruction word and a
	// state to run it from.
	ARM64SiteCase = qemu.ARM64SiteCase
)

// GenARM64SiteCases generates n site cases of the given classes from seed.
func GenARM64SiteCases(seed uint64, n int, classes []string) []ARM64SiteCase {
	return qemu.GenARM64SiteCases(seed, n, classes)
}

// Addresses of the image of a QEMUOracle.
const (
	ARM64CodeAddr = qemu.ARM64CodeAddr // the code window of the cases
	ARM64NearAddr = qemu.ARM64NearAddr // a code window within branch reach of it
	ARM64RWAddr   = qemu.ARM64RWAddr   // the read-write data window
)
