package emulate

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
)

// X86Supported reports whether inst is emulated exactly: nil if so, else an
// error wrapping ErrNotEmulated that says why.
func X86Supported(inst *decode.X86Inst) error {
	return fmt.Errorf("%s: %w", inst.Mnemonic, ErrNotEmulated)
}
