package emulate

import "errors"

// ErrNotEmulated means the instruction is outside what the emulator
// executes exactly; the caller must use another strategy.
var ErrNotEmulated = errors.New("instruction not emulated")
