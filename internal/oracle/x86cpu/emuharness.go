package x86cpu

// The emulator oracle runs its cases in a child process that holds nothing
// but the areas below (every other mapping is removed). The code windows,
// the read-only page and the read-write data window are what the cases may
// touch; the control area belongs to the harness.
const (
	// EmuCodeLow and EmuCodeHigh are the two code windows, read+execute,
	// EmuCodeSize bytes each. The high one sits just below the top of the
	// user address space, so that relative branches and RIP-relative
	// operands from it can reach non-canonical addresses.
	EmuCodeLow  = 0x1000_0000_0000
	EmuCodeHigh = 0x7fff_fff0_0000
	EmuCodeSize = 0x10000
	// EmuROAddr is a read-only data page, EmuROSize bytes.
	EmuROAddr = 0x1000_0010_0000
	EmuROSize = 0x1000
	// EmuRWAddr is the read-write data window, EmuRWSize bytes, right
	// after the read-only page and followed by an unmapped page.
	EmuRWAddr = EmuROAddr + EmuROSize
	EmuRWSize = 0x2000
	// EmuFSBase and EmuGSBase are the FS and GS bases of every case.
	EmuFSBase = EmuRWAddr + 0x800
	EmuGSBase = EmuROAddr + 0x100

	// emuCtrlAddr is the control area: control words, harness code, the
	// cases and their results (emuFileSize bytes from the shared file),
	// then the signal stack. The generator does not emit cases whose
	// memory accesses touch it. It is far from every small multiple and
	// sum of the windows' addresses (base+index*scale with pointers into
	// the windows), which a case easily forms.
	emuCtrlAddr  = 0x5a5a_5a5a_0000
	emuAltStack  = emuCtrlAddr + 0x200000
	emuAltSize   = 0x10000
	emuCtrlLimit = emuAltStack + emuAltSize
)

// Offsets in the shared file (a memfd mapped in both processes). The
// control area maps [0, emuOffCodeLow) at emuCtrlAddr+offset.
const (
	emuOffCtrl     = 0x0
	emuOffHarness  = 0x1000 // mapped read+execute
	emuOffTemplate = 0x2000 // the initial content of the read-write window
	emuOffCases    = 0x10000
	emuOffResults  = 0x90000
	emuOffCodeLow  = 0x190000
	emuOffCodeHigh = emuOffCodeLow + EmuCodeSize
	emuOffRO       = emuOffCodeHigh + EmuCodeSize
	emuOffRW       = emuOffRO + EmuROSize
	emuFileSize    = emuOffRW + EmuRWSize

	emuMaxBatch    = 2048
	emuCaseShift   = 8 // 256-byte case records
	emuResultShift = 9 // 512-byte result records
	emuMaxDiffs    = 8 // changed quadwords recorded per case
)

// A case record holds the x86hCaseWords quadwords of the signal context.
// A result record: the common head (x86hRes*), then the changed quadwords
// of the read-write window.
const (
	emuResNDiff = x86hResOwn
	emuResDiffs = emuResNDiff + 8 // emuMaxDiffs pairs (address, new value)
)

// emuHarnessCode is the harness: entry points are offsets in the returned
// code, which is placed at emuCtrlAddr+emuOffHarness.
type emuHarnessCode struct {
	code []byte
	x86hEntries
}

// buildEmuHarness assembles the harness (see x86Harness.build): it has no
// steps of its own.
func buildEmuHarness() (emuHarnessCode, error) {
	h := x86Harness{
		code:        emuCtrlAddr + emuOffHarness,
		ctrl:        emuCtrlAddr + emuOffCtrl,
		cases:       emuCtrlAddr + emuOffCases,
		results:     emuCtrlAddr + emuOffResults,
		rw:          EmuRWAddr,
		template:    emuCtrlAddr + emuOffTemplate,
		rwSize:      EmuRWSize,
		caseShift:   emuCaseShift,
		resultShift: emuResultShift,
		resNDiff:    emuResNDiff,
		resDiffs:    emuResDiffs,
		maxDiffs:    emuMaxDiffs,
	}
	code, e, err := h.build()
	return emuHarnessCode{code: code, x86hEntries: e}, err
}
