package jit

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/probeopt/probeopt/bpf/maps"
)

// genRingOps returns a program that writes records of random sizes (1 to
// 120 bytes, each byte a function of the record and its index) to the
// ring buffer "r" with ringbuf_output, or reserve and submit, or reserve
// and discard; the bytes of one run stay under half the ring.
func genRingOps(r *rand.Rand, seq int) asm.Instructions {
	var insns asm.Instructions
	total := 0
	for n := 0; ; n++ {
		size := 1 + r.IntN(120)
		total += 8 + (size+7)&^7
		if total > 2048 {
			break
		}
		word := func(off int) int64 {
			v := int64(0)
			for b := 0; b < 8; b++ {
				v |= int64(byte(seq*31+n*7+off+b)) << (8 * b)
			}
			return v
		}
		switch r.IntN(3) {
		case 0: // output from the stack
			for off := 0; off < 128; off += 8 {
				insns = append(insns, asm.LoadImm(asm.R1, word(off), asm.DWord),
					asm.StoreMem(asm.RFP, int16(-128+off), asm.R1, asm.DWord))
			}
			insns = append(insns, asm.LoadMapPtr(asm.R1, 0).WithReference("r"),
				asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -128),
				asm.Mov.Imm(asm.R3, int32(size)), asm.Mov.Imm(asm.R4, 0),
				asm.FnRingbufOutput.Call())
		default: // reserve, fill, submit or discard
			var fill asm.Instructions
			off := 0
			for ; off+8 <= size; off += 8 {
				fill = append(fill, asm.LoadImm(asm.R1, word(off), asm.DWord),
					asm.StoreMem(asm.R6, int16(off), asm.R1, asm.DWord))
			}
			for ; off < size; off++ {
				fill = append(fill, asm.StoreImm(asm.R6, int16(off), word(off)&0xff, asm.Byte))
			}
			commit := asm.FnRingbufSubmit
			if r.IntN(4) == 0 {
				commit = asm.FnRingbufDiscard
			}
			insns = append(insns, asm.LoadMapPtr(asm.R1, 0).WithReference("r"),
				asm.Mov.Imm(asm.R2, int32(size)), asm.Mov.Imm(asm.R3, 0),
				asm.FnRingbufReserve.Call(),
				asm.Instruction{OpCode: asm.JEq.Op(asm.ImmSource), Dst: asm.R0, Offset: int16(fill.Size()/8 + 4)},
				asm.Mov.Reg(asm.R6, asm.R0))
			insns = append(insns, fill...)
			insns = append(insns, asm.Mov.Reg(asm.R1, asm.R6), asm.Mov.Imm(asm.R2, 0), commit.Call())
		}
	}
	return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
}

// TestRingOracle runs ring buffer programs in the kernel (records read
// with cilium/ebpf's ringbuf.Reader) and through the JIT (records read
// with maps.Reader), 60 runs each on one 4 KiB ring so that the records
// wrap around it many times: the same records, in the same order.
func TestRingOracle(t *testing.T) {
	newOracle(t) // skips without the privilege to load BPF
	spec := &ebpf.MapSpec{Name: "r", Type: ebpf.RingBuf, MaxEntries: 4096}
	kring, err := ebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer kring.Close()
	krd, err := ringbuf.NewReader(kring)
	if err != nil {
		t.Fatal(err)
	}
	defer krd.Close()
	ring, err := maps.New(testArena(t), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	ord, err := maps.NewReader(ring)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	records := 0
	for seq := 0; seq < 60; seq++ {
		insns := genRingOps(r, seq)
		if _, err := kernelRun(insns, map[string]*ebpf.Map{"r": kring}); err != nil {
			t.Fatalf("run %d: %v", seq, err)
		}
		if _, err := jitRun(insns, map[string]*maps.Map{"r": ring}, 0); err != nil {
			t.Fatal(err)
		}
		var kr, or [][]byte
		for {
			krd.SetDeadline(time.Now().Add(5 * time.Millisecond))
			rec, err := krd.Read()
			if err != nil {
				break
			}
			kr = append(kr, rec.RawSample)
		}
		for {
			ord.SetDeadline(time.Now().Add(5 * time.Millisecond))
			rec, err := ord.Read()
			if err != nil {
				break
			}
			or = append(or, rec.RawSample)
		}
		if len(kr) == 0 || !slices.EqualFunc(kr, or, bytes.Equal) {
			t.Fatalf("run %d: kernel %d records, JIT %d:\n%x\n%x", seq, len(kr), len(or), kr, or)
		}
		records += len(kr)
	}
	t.Logf("%d records equal over 60 runs", records)
}
