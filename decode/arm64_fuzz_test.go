package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/probeopt/probeopt/internal/testenv"
)

// FuzzDecodeARM64 checks the decoder's invariants on arbitrary input: no
// panic; an error exactly when nothing was decoded; a deterministic result
// that depends on the address only through Addr and Target; PC-relative
// fields that agree with each other; a non-empty text.
func FuzzDecodeARM64(f *testing.F) {
	for _, w := range []uint32{
		0xd503201f, 0xd503233f, 0xd65f0bff, 0x54000051, 0xb0000000, 0x9c000040,
		0xc85f7c20, 0x48207c82, 0xb820003f, 0xa9bf7bfd, 0xd53b4220, 0x00000000,
	} {
		f.Add(ARM64Code(w), uint64(0x400000))
	}
	f.Add([]byte{0x1f, 0x20}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, addr uint64) {
		inst, err := DecodeARM64(b, addr)
		if err != nil {
			if msg := checkARM64Error(b, &inst, err); msg != "" {
				t.Fatal(msg)
			}
			return
		}
		if len(b) < 4 {
			t.Fatalf("decoded %d bytes", len(b))
		}
		w := binary.LittleEndian.Uint32(b)
		if inst.Len != 4 || inst.Word != w || inst.Addr != addr {
			t.Fatalf("Len %d Word %#x Addr %#x for word %#x at %#x", inst.Len, inst.Word, inst.Addr, w, addr)
		}
		again, err := DecodeARM64(b, addr)
		if err != nil || again != inst {
			t.Fatalf("not deterministic: %+v then %+v, %v", inst, again, err)
		}
		for _, check := range []func(b []byte, inst *ARM64Inst) string{checkARM64PCRel, checkARM64Fields, checkARM64Moved} {
			if msg := check(b, &inst); msg != "" {
				t.Fatalf("%#08x: %s", w, msg)
			}
		}
		text := inst.Text()
		if text == "" {
			t.Fatalf("%#08x: empty Text", w)
		}
		if inst.Text() != text {
			t.Fatalf("%#08x: Text not deterministic", w)
		}
	})
}

// checkARM64Error checks a decode of b that failed with err: a zero
// result, ErrTruncated exactly for fewer than 4 bytes, ErrInvalid only for
// the permanently undefined words (top half zero), and the text "(bad)".
// It returns what is wrong, or "".
func checkARM64Error(b []byte, inst *ARM64Inst, err error) string {
	if *inst != (ARM64Inst{}) {
		return fmt.Sprintf("error %v with a non-zero result %+v", err, *inst)
	}
	switch {
	case errors.Is(err, ErrTruncated):
		if len(b) >= 4 {
			return fmt.Sprintf("ErrTruncated for %d bytes", len(b))
		}
	case errors.Is(err, ErrInvalid):
		if len(b) < 4 || binary.LittleEndian.Uint32(b)>>16 != 0 {
			return fmt.Sprintf("ErrInvalid for % x", b)
		}
	default:
		return fmt.Sprintf("unexpected error %v", err)
	}
	if inst.Text() != "(bad)" {
		return fmt.Sprintf("Text of a failed decode: %q", inst.Text())
	}
	return ""
}

// checkARM64PCRel checks that the PC-relative fields of inst agree with
// each other, with its class and with the reach of their encodings.
func checkARM64PCRel(_ []byte, inst *ARM64Inst) string {
	if inst.PCRel {
		base := inst.Addr
		if inst.Mnemonic == "adrp" {
			base &^= 0xfff
		}
		if inst.Target != base+uint64(inst.Offset) {
			return fmt.Sprintf("Target %#x, Addr %#x, Offset %d", inst.Target, inst.Addr, inst.Offset)
		}
		if inst.Class != ARM64ClassBranch && inst.Class != ARM64ClassAdr && inst.Class != ARM64ClassLiteral {
			return fmt.Sprintf("PC-relative %v", inst.Class)
		}
	} else if inst.Target != 0 || inst.Offset != 0 {
		return fmt.Sprintf("Target %#x Offset %d without PCRel", inst.Target, inst.Offset)
	}
	if inst.Class == ARM64ClassBranch && inst.Branch.Relative() != inst.PCRel {
		return fmt.Sprintf("branch %v with PCRel %v", inst.Branch, inst.PCRel)
	}
	if (inst.Class == ARM64ClassAdr || inst.Class == ARM64ClassLiteral) && !inst.PCRel {
		return fmt.Sprintf("%v not PC-relative", inst.Class)
	}
	if inst.Mnemonic != "adr" && inst.Offset%4 != 0 {
		return fmt.Sprintf("misaligned offset %d", inst.Offset)
	}
	if o := inst.Offset; inst.Mnemonic != "adrp" && (o < -1<<27 || o >= 1<<27) {
		return fmt.Sprintf("offset %d out of range", o)
	}
	if inst.HasCond != (inst.Branch == BranchJcc) {
		return fmt.Sprintf("HasCond %v for %v", inst.HasCond, inst.Branch)
	}
	return ""
}

// checkARM64Fields checks the classification's bookkeeping: the class
// against the mnemonic and the flags, the register sets and numbers.
func checkARM64Fields(_ []byte, inst *ARM64Inst) string {
	if (inst.Class == ARM64ClassOther) != (inst.Mnemonic == "") {
		return fmt.Sprintf("class %v with mnemonic %q", inst.Class, inst.Mnemonic)
	}
	if (inst.Class == ARM64ClassOther) != inst.RegsApprox {
		return fmt.Sprintf("class %v with RegsApprox %v", inst.Class, inst.RegsApprox)
	}
	if inst.Read>>32 != 0 || inst.Written>>32 != 0 {
		return fmt.Sprintf("register sets beyond sp: %#x %#x", inst.Read, inst.Written)
	}
	if (inst.Exclusive != ARM64ExclNone) != (inst.Class == ARM64ClassExclusive) {
		return fmt.Sprintf("Exclusive %v in class %v", inst.Exclusive, inst.Class)
	}
	if inst.LSE != (inst.Class == ARM64ClassAtomic) {
		return fmt.Sprintf("LSE %v in class %v", inst.LSE, inst.Class)
	}
	if inst.Writeback && !inst.Written.Has(int(inst.Rn)) {
		return fmt.Sprintf("writeback without writing %v", inst.Rn)
	}
	for _, r := range []ARM64Reg{inst.Rd, inst.Rn, inst.Rt, inst.Rt2, inst.Rs, inst.Rm} {
		if r < ARM64NoReg || r > ARM64ZR {
			return fmt.Sprintf("register %d out of range", r)
		}
	}
	return ""
}

// checkARM64Moved decodes b 4 KiB further: only Addr and Target may
// change, Target by the same 4 KiB when the instruction is PC-relative.
func checkARM64Moved(b []byte, inst *ARM64Inst) string {
	moved, err := DecodeARM64(b, inst.Addr+0x1000)
	if err != nil {
		return fmt.Sprintf("at %#x: %v", inst.Addr+0x1000, err)
	}
	wantTarget := inst.Target
	if inst.PCRel {
		wantTarget += 0x1000
	}
	if moved.Target != wantTarget {
		return fmt.Sprintf("Target %#x after moving, was %#x", moved.Target, inst.Target)
	}
	moved.Addr, moved.Target = inst.Addr, inst.Target
	if moved != *inst {
		return fmt.Sprintf("decode depends on the address: %+v vs %+v", moved, *inst)
	}
	return ""
}

// TestARM64AllWords decodes every 32-bit word (PROBEOPT_LONG=1 only: a few
// minutes) and checks the invariants that do not need Text.
func TestARM64AllWords(t *testing.T) {
	if !testenv.Long() {
		t.Skip("set PROBEOPT_LONG=1 to decode all 2^32 words")
	}
	const shards = 16
	errs := make(chan string, shards)
	for s := uint64(0); s < shards; s++ {
		go func() {
			var b [4]byte
			lo, hi := s<<28, (s+1)<<28
			for w := lo; w < hi; w++ {
				binary.LittleEndian.PutUint32(b[:], uint32(w))
				inst, err := DecodeARM64(b[:], 0x400ffc)
				switch {
				case err != nil:
					if w>>16 != 0 || inst.Len != 0 {
						errs <- fmt.Sprintf("%#08x: %v (Len %d)", w, err, inst.Len)
						return
					}
				case inst.Len != 4 || (inst.Class == ARM64ClassOther) != (inst.Mnemonic == ""):
					errs <- fmt.Sprintf("%#08x: Len %d class %v mnemonic %q", w, inst.Len, inst.Class, inst.Mnemonic)
					return
				case inst.PCRel && inst.Mnemonic != "adrp" && inst.Target != inst.Addr+uint64(inst.Offset):
					errs <- fmt.Sprintf("%#08x: Target %#x Offset %d", w, inst.Target, inst.Offset)
					return
				case inst.Class == ARM64ClassBranch && inst.Branch.Relative() != inst.PCRel:
					errs <- fmt.Sprintf("%#08x: branch %v PCRel %v", w, inst.Branch, inst.PCRel)
					return
				}
			}
			errs <- ""
		}()
	}
	for range shards {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}
