//go:build linux && amd64

package x86cpu

import (
	"encoding/binary"
	"errors"
)

// x86hFlagsIn is the part of a case's RFLAGS that the case may choose: the
// status flags and DF. IF is always set (0x202 with the reserved bit).
const x86hFlagsIn = 0x8d5 | 0x400

// putCaseRegs writes the registers a case starts from into its record.
func putCaseRegs(rec []byte, gpr *[16]uint64, rip, rflags uint64) {
	le := binary.LittleEndian
	for r := 0; r < 16; r++ {
		le.PutUint64(rec[8*x86hGregOf[r]:], gpr[r])
	}
	le.PutUint64(rec[8*x86hGregRIP:], rip)
	le.PutUint64(rec[8*x86hGregFlags:], rflags&x86hFlagsIn|0x202)
}

// x86hResult is the common head of a result record (x86hRes*): how the
// case ended and the registers then.
type x86hResult struct {
	signal, code int
	addr         uint64 // si_addr
	trap         int    // the exception vector the kernel recorded
	errCode      uint64
	gpr          [16]uint64
	rip, rflags  uint64
}

// readResultHead decodes the common head of result record rec.
func readResultHead(rec []byte) x86hResult {
	le := binary.LittleEndian
	greg := func(k int) uint64 { return le.Uint64(rec[x86hResGregs+8*k:]) }
	r := x86hResult{
		signal:  int(int32(le.Uint64(rec[x86hResSigno:]))),
		code:    int(int32(le.Uint64(rec[x86hResCode:]))),
		addr:    le.Uint64(rec[x86hResAddr:]),
		trap:    int(greg(x86hGregTrap)),
		errCode: greg(x86hGregErr),
		rip:     greg(x86hGregRIP),
		rflags:  greg(x86hGregFlags),
	}
	for k := 0; k < 16; k++ {
		r.gpr[k] = greg(x86hGregOf[k])
	}
	return r
}

// readWrites decodes the changed quadwords of the read-write window that a
// result record holds: their number at nOff, then up to max (address,
// value) pairs from diffsOff. lost is set when more changed than were
// recorded.
func readWrites(rec []byte, nOff, diffsOff, max int) (w []MemWord, lost bool) {
	le := binary.LittleEndian
	n := int(le.Uint64(rec[nOff:]))
	for k := 0; k < min(n, max); k++ {
		w = append(w, MemWord{Addr: le.Uint64(rec[diffsOff+16*k:]), Val: le.Uint64(rec[diffsOff+16*k+8:])})
	}
	return w, n > max
}

// runBatches runs n cases in batches of at most max: batch(lo, hi) runs
// cases [lo, hi). A batch whose child died is run once more in a new
// child, after reload (when set) has restored what the dead child may have
// left changed; the oracle must be locked.
func (h *oracleHost) runBatches(n, max int, reload func(), batch func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += max {
		hi := min(lo+max, n)
		err := batch(lo, hi)
		if errors.Is(err, ErrChildDied) && !h.closed {
			if reload != nil {
				reload()
			}
			err = batch(lo, hi)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
