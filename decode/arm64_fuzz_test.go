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
		f.Add(arm64Word(w), uint64(0x400000))
	}
	f.Add([]byte{0x1f, 0x20}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, addr uint64) {
		inst, err := DecodeARM64(b, addr)
		if err != nil {
			if inst != (ARM64Inst{}) {
				t.Fatalf("error %v with a non-zero result %+v", err, inst)
			}
			switch {
			case errors.Is(err, ErrTruncated):
				if len(b) >= 4 {
					t.Fatalf("ErrTruncated for %d bytes", len(b))
				}
			case errors.Is(err, ErrInvalid):
				if len(b) < 4 || binary.LittleEndian.Uint32(b)>>16 != 0 {
					t.Fatalf("ErrInvalid for % x", b)
				}
			default:
				t.Fatalf("unexpected error %v", err)
			}
			if inst.Text() != "(bad)" {
				t.Fatalf("Text of a failed decode: %q", inst.Text())
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

		// PC-relative consistency.
		if inst.PCRel {
			base := addr
			if inst.Mnemonic == "adrp" {
				base &^= 0xfff
			}
			if inst.Target != base+uint64(inst.Offset) {
				t.Fatalf("%#08x: Target %#x, Addr %#x, Offset %d", w, inst.Target, addr, inst.Offset)
			}
			if inst.Class != ARM64ClassBranch && inst.Class != ARM64ClassAdr && inst.Class != ARM64ClassLiteral {
				t.Fatalf("%#08x: PC-relative %v", w, inst.Class)
			}
		} else if inst.Target != 0 || inst.Offset != 0 {
			t.Fatalf("%#08x: Target %#x Offset %d without PCRel", w, inst.Target, inst.Offset)
		}
		if inst.Class == ARM64ClassBranch && inst.Branch.Relative() != inst.PCRel {
			t.Fatalf("%#08x: branch %v with PCRel %v", w, inst.Branch, inst.PCRel)
		}
		if (inst.Class == ARM64ClassAdr || inst.Class == ARM64ClassLiteral) && !inst.PCRel {
			t.Fatalf("%#08x: %v not PC-relative", w, inst.Class)
		}
		if inst.Mnemonic != "adr" && inst.Offset%4 != 0 {
			t.Fatalf("%#08x: misaligned offset %d", w, inst.Offset)
		}
		if o := inst.Offset; inst.Mnemonic != "adrp" && (o < -1<<27 || o >= 1<<27) {
			t.Fatalf("%#08x: offset %d out of range", w, o)
		}
		if inst.HasCond != (inst.Branch == BranchJcc) {
			t.Fatalf("%#08x: HasCond %v for %v", w, inst.HasCond, inst.Branch)
		}

		// Classification bookkeeping.
		if (inst.Class == ARM64ClassOther) != (inst.Mnemonic == "") {
			t.Fatalf("%#08x: class %v with mnemonic %q", w, inst.Class, inst.Mnemonic)
		}
		if (inst.Class == ARM64ClassOther) != inst.RegsApprox {
			t.Fatalf("%#08x: class %v with RegsApprox %v", w, inst.Class, inst.RegsApprox)
		}
		if inst.Read>>32 != 0 || inst.Written>>32 != 0 {
			t.Fatalf("%#08x: register sets beyond sp: %#x %#x", w, inst.Read, inst.Written)
		}
		if (inst.Exclusive != ARM64ExclNone) != (inst.Class == ARM64ClassExclusive) {
			t.Fatalf("%#08x: Exclusive %v in class %v", w, inst.Exclusive, inst.Class)
		}
		if inst.LSE != (inst.Class == ARM64ClassAtomic) {
			t.Fatalf("%#08x: LSE %v in class %v", w, inst.LSE, inst.Class)
		}
		if inst.Writeback && !inst.Written.Has(int(inst.Rn)) {
			t.Fatalf("%#08x: writeback without writing %v", w, inst.Rn)
		}
		for _, r := range []ARM64Reg{inst.Rd, inst.Rn, inst.Rt, inst.Rt2, inst.Rs, inst.Rm} {
			if r < ARM64NoReg || r > ARM64ZR {
				t.Fatalf("%#08x: register %d out of range", w, r)
			}
		}

		// Moving the instruction changes only Addr and Target.
		moved, err := DecodeARM64(b, addr+0x1000)
		if err != nil {
			t.Fatalf("%#08x at %#x: %v", w, addr+0x1000, err)
		}
		wantTarget := inst.Target
		if inst.PCRel {
			wantTarget += 0x1000
		}
		if moved.Target != wantTarget {
			t.Fatalf("%#08x: Target %#x after moving, was %#x", w, moved.Target, inst.Target)
		}
		moved.Addr, moved.Target = inst.Addr, inst.Target
		if moved != inst {
			t.Fatalf("%#08x: decode depends on the address: %+v vs %+v", w, moved, inst)
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
