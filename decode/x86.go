package decode

// X86Decoder decodes x86-64 instructions in 64-bit mode. The zero value
// decodes as an AMD64 CPU (and objdump) does; set Vendor to follow an Intel
// CPU where the two differ.
type X86Decoder struct {
	Vendor Vendor
}

// DecodeX86 decodes the first instruction in b, located at address addr,
// with the default (AMD) vendor rules.
func DecodeX86(b []byte, addr uint64) (X86Inst, error) {
	var inst X86Inst
	err := X86Decoder{}.Decode(b, addr, &inst)
	return inst, err
}

// Decode decodes the first instruction in b, located at address addr, into
// inst. On error inst.Len is 0 and the error is one of ErrTruncated,
// ErrInvalid, ErrTooLong or ErrUnknown. Decode does not allocate.
func (d X86Decoder) Decode(b []byte, addr uint64, inst *X86Inst) error {
	*inst = X86Inst{}
	return ErrUnknown
}
