package bpf

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/probeopt/probeopt/bpf/jit"
	"github.com/probeopt/probeopt/bpf/maps"
)

// PrintkReader reads the lines the programs of an instance write with
// trace_printk (bpf_printk), formatted as the kernel's bpf_trace_printk
// formats them: the conversions %d %i %u %x %X %c %s %% and %px, with
// flags, width, precision and the l and ll length modifiers (a value
// without one is 32 bits wide); a %s string is read from the maps'
// memory (a constant of the program), and is empty elsewhere, as the
// kernel's for a user-space pointer. A format that is not in the maps'
// memory (on the program's stack) is printed as "(format not readable)".
type PrintkReader struct {
	rd       *maps.Reader // nil when no program calls trace_printk
	arena    *maps.Arena
	deadline time.Time
}

// Printk returns a reader of the instance's trace_printk lines.
func (in *Instance) Printk() (*PrintkReader, error) {
	r := &PrintkReader{arena: in.arena}
	if in.Runtime.Printk != nil {
		rd, err := maps.NewReader(in.Runtime.Printk)
		if err != nil {
			return nil, err
		}
		r.rd = rd
	}
	return r, nil
}

// SetDeadline sets the time after which Read returns maps.ErrDeadline.
func (r *PrintkReader) SetDeadline(t time.Time) {
	r.deadline = t
	if r.rd != nil {
		r.rd.SetDeadline(t)
	}
}

// Read returns the next line, waiting for one.
func (r *PrintkReader) Read() (string, error) {
	if r.rd == nil {
		// No program writes lines: wait for the deadline.
		for r.deadline.IsZero() {
			time.Sleep(time.Second)
		}
		time.Sleep(time.Until(r.deadline))
		return "", maps.ErrDeadline
	}
	rec, err := r.rd.Read()
	if err != nil {
		return "", err
	}
	b := rec.RawSample
	if len(b) < jit.PrintkRecordSize {
		return "", fmt.Errorf("trace_printk record of %d bytes: %w", len(b), maps.ErrInvalid)
	}
	le := binary.LittleEndian
	format, ok := r.bytes(le.Uint64(b[0:]), int(le.Uint64(b[8:])))
	if !ok {
		return "(format not readable)", nil
	}
	args := [3]uint64{le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])}
	return FormatPrintk(format, args, func(addr uint64) string {
		s, _ := r.bytes(addr, 1<<10)
		if i := strings.IndexByte(string(s), 0); i >= 0 {
			s = s[:i]
		}
		return string(s)
	}), nil
}

// bytes returns up to n bytes at addr in the arena (the executing
// process's address), cut at the arena's end.
func (r *PrintkReader) bytes(addr uint64, n int) ([]byte, bool) {
	mem, base := r.arena.Mem(), r.arena.Base()
	if addr < base || addr >= base+uint64(len(mem)) || n < 0 {
		return nil, false
	}
	off := int(addr - base)
	end := min(off+n, len(mem))
	return mem[off:end], true
}

// FormatPrintk formats a trace_printk line: format (cut at its first
// NUL) with args, str reading a %s argument's string. A trailing newline
// is dropped.
func FormatPrintk(format []byte, args [3]uint64, str func(addr uint64) string) string {
	if i := strings.IndexByte(string(format), 0); i >= 0 {
		format = format[:i]
	}
	f := string(format)
	var out strings.Builder
	n := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			out.WriteByte(f[i])
			continue
		}
		j := i + 1
		for j < len(f) && strings.IndexByte("-+ 0#", f[j]) >= 0 {
			j++
		}
		for j < len(f) && (f[j] >= '0' && f[j] <= '9' || f[j] == '.') {
			j++
		}
		long := 0
		for j < len(f) && f[j] == 'l' && long < 2 {
			j++
			long++
		}
		if j >= len(f) {
			out.WriteString(f[i:])
			break
		}
		spec := f[i+1 : j-long]
		verb := f[j]
		if verb == '%' {
			out.WriteByte('%')
			i = j
			continue
		}
		var v uint64
		if n < len(args) {
			v = args[n]
		}
		n++
		switch verb {
		case 'd', 'i':
			if long == 0 {
				fmt.Fprintf(&out, "%"+spec+"d", int32(v))
			} else {
				fmt.Fprintf(&out, "%"+spec+"d", int64(v))
			}
		case 'u':
			if long == 0 {
				v = uint64(uint32(v))
			}
			fmt.Fprintf(&out, "%"+spec+"d", v)
		case 'x', 'X':
			if long == 0 {
				v = uint64(uint32(v))
			}
			fmt.Fprintf(&out, "%"+spec+string(verb), v)
		case 'c':
			fmt.Fprintf(&out, "%"+spec+"c", rune(byte(v)))
		case 's':
			fmt.Fprintf(&out, "%"+spec+"s", str(v))
		case 'p':
			if j+1 < len(f) && f[j+1] == 'x' {
				j++
			}
			fmt.Fprintf(&out, "%016x", v)
		default:
			out.WriteString(f[i : j+1])
		}
		i = j
	}
	return strings.TrimSuffix(out.String(), "\n")
}
