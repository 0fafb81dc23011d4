// Package decode decodes single machine instructions of x86-64 and arm64
// exactly enough to probe them: the length, every prefix and encoding field,
// where the displacement and immediates sit, whether an operand is relative to
// the instruction pointer, the kind and target of a branch, and the
// general-purpose registers the instruction reads and writes.
//
// The x86-64 decoder is the package's own: a table-driven length and
// attribute decoder whose tables are generated (see x86map.txt and
// internal/x86gen) rather than a maze of switches. The arm64 decoder
// classifies the fixed 32-bit word with masks. Text (mnemonics and operands)
// comes from golang.org/x/arch only where that decoder agrees with this one;
// otherwise this package renders the instruction itself, so a wrong text is
// never shown silently.
//
// The package does not execute instructions (see emulate), relocate them (see
// xol), or decide whether they can be probed (see plan).
package decode
