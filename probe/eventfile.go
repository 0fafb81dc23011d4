package probe

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// The binary event format ("probeopt trace --events --format bin"): a
// header that names the probes, then one fixed-size record per event, all
// little-endian.
//
//	header:
//	  8 bytes  magic "PRBOEVT1"
//	  4        record size in bytes (EventRecordSize)
//	  4        number of probes N
//	  N times: 4 probe id, 4 length L of the spec, L bytes of the spec
//	record (EventRecordSize bytes):
//	  +0   8   time, Unix nanoseconds (signed)
//	  +8   4   process id
//	  +12  4   thread id (0 if it could not be told)
//	  +16  4   probe id
//	  +20  4   flags: bit 0 set for the hit of a return probe
//	  +24  8   run-time address of the site
//	  +32  48  rdi rsi rdx rcx r8 r9 at the hit; for a return, the value
//	           returned (rax) and five zeros
//	  +80  8   goroutine id (Event.Goid; 0 where there is none)
//
// A reader must take the record size from the header: later versions
// may append fields to a record. Records of 80 bytes (before the
// goroutine id) are read with a goroutine id of 0.
const (
	eventMagic = "PRBOEVT1"
	// EventRecordSize is the size of one record of the binary event
	// format.
	EventRecordSize = 88
	// eventRecordV1 is the size of the first version's records.
	eventRecordV1 = 80
	flagReturn    = 1
)

// ErrEventFormat means a stream is not in the binary event format.
var ErrEventFormat = errors.New("not a probeopt event stream")

// EventWriter writes events in the binary event format. It buffers: call
// Flush at the end. It is not safe for concurrent use.
type EventWriter struct {
	w   io.Writer
	buf []byte // records not yet written, up to eventBuffer bytes
	err error  // the first write error: every later write returns it
}

// eventBuffer is how many bytes an EventWriter buffers.
const eventBuffer = 1 << 20

// NewEventWriter writes the header, naming probes, to w.
func NewEventWriter(w io.Writer, probes []Probe) (*EventWriter, error) {
	ew := &EventWriter{w: w, buf: make([]byte, 0, eventBuffer)}
	h := ew.buf
	h = append(h, eventMagic...)
	h = binary.LittleEndian.AppendUint32(h, EventRecordSize)
	h = binary.LittleEndian.AppendUint32(h, uint32(len(probes)))
	for _, p := range probes {
		h = binary.LittleEndian.AppendUint32(h, uint32(p.ID))
		h = binary.LittleEndian.AppendUint32(h, uint32(len(p.Spec)))
		h = append(h, p.Spec...)
	}
	ew.buf = h
	if len(h) > eventBuffer/2 {
		if err := ew.Flush(); err != nil {
			return nil, fmt.Errorf("write the event header: %w", err)
		}
	}
	return ew, nil
}

// Write writes the records of evs.
func (ew *EventWriter) Write(evs ...Event) error {
	for i := range evs {
		if len(ew.buf)+EventRecordSize > cap(ew.buf) {
			if err := ew.Flush(); err != nil {
				return err
			}
		}
		n := len(ew.buf)
		ew.buf = ew.buf[:n+EventRecordSize]
		putEventRecord(ew.buf[n:n+EventRecordSize], &evs[i])
	}
	return nil
}

// putEventRecord encodes e into b, a record's bytes.
func putEventRecord(b []byte, e *Event) {
	_ = b[EventRecordSize-1]
	binary.LittleEndian.PutUint64(b[0:], uint64(e.Time.UnixNano()))
	binary.LittleEndian.PutUint32(b[8:], uint32(e.Pid))
	binary.LittleEndian.PutUint32(b[12:], uint32(e.Tid))
	binary.LittleEndian.PutUint32(b[16:], uint32(e.Probe))
	var flags uint32
	args := &e.Args
	if e.Return {
		flags |= flagReturn
		args = &[6]uint64{e.Ret}
	}
	binary.LittleEndian.PutUint32(b[20:], flags)
	binary.LittleEndian.PutUint64(b[24:], e.Addr)
	binary.LittleEndian.PutUint64(b[32:], args[0])
	binary.LittleEndian.PutUint64(b[40:], args[1])
	binary.LittleEndian.PutUint64(b[48:], args[2])
	binary.LittleEndian.PutUint64(b[56:], args[3])
	binary.LittleEndian.PutUint64(b[64:], args[4])
	binary.LittleEndian.PutUint64(b[72:], args[5])
	binary.LittleEndian.PutUint64(b[80:], e.Goid)
}

// Flush writes the buffered records.
func (ew *EventWriter) Flush() error {
	if ew.err != nil {
		return ew.err
	}
	if len(ew.buf) == 0 {
		return nil
	}
	if _, err := ew.w.Write(ew.buf); err != nil {
		ew.err = fmt.Errorf("write events: %w", err)
		return ew.err
	}
	ew.buf = ew.buf[:0]
	return nil
}

// EventReader reads a stream in the binary event format.
type EventReader struct {
	r   *bufio.Reader
	rec []byte
	// Probes are the probes the header names.
	Probes []Probe
}

// NewEventReader reads the header of a stream.
func NewEventReader(r io.Reader) (*EventReader, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var h [16]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, fmt.Errorf("read the header: %w: %w", ErrEventFormat, err)
	}
	if string(h[:8]) != eventMagic {
		return nil, fmt.Errorf("magic %q: %w", h[:8], ErrEventFormat)
	}
	size := binary.LittleEndian.Uint32(h[8:])
	if size < eventRecordV1 || size > 1<<16 {
		return nil, fmt.Errorf("record size %d: %w", size, ErrEventFormat)
	}
	n := binary.LittleEndian.Uint32(h[12:])
	if n > 1<<20 {
		return nil, fmt.Errorf("%d probes: %w", n, ErrEventFormat)
	}
	er := &EventReader{r: br, rec: make([]byte, size)}
	for i := uint32(0); i < n; i++ {
		var ph [8]byte
		if _, err := io.ReadFull(br, ph[:]); err != nil {
			return nil, fmt.Errorf("read probe %d: %w: %w", i, ErrEventFormat, err)
		}
		l := binary.LittleEndian.Uint32(ph[4:])
		if l > 1<<16 {
			return nil, fmt.Errorf("probe %d: spec of %d bytes: %w", i, l, ErrEventFormat)
		}
		spec := make([]byte, l)
		if _, err := io.ReadFull(br, spec); err != nil {
			return nil, fmt.Errorf("read probe %d: %w: %w", i, ErrEventFormat, err)
		}
		er.Probes = append(er.Probes, Probe{ID: int(binary.LittleEndian.Uint32(ph[:])), Spec: string(spec)})
	}
	return er, nil
}

// Read reads the next event into ev. It returns io.EOF at the end of the
// stream, and an error wrapping io.ErrUnexpectedEOF for a truncated
// record.
func (er *EventReader) Read(ev *Event) error {
	if _, err := io.ReadFull(er.r, er.rec); err != nil {
		return err
	}
	b := er.rec
	*ev = Event{
		Time:  time.Unix(0, int64(binary.LittleEndian.Uint64(b[0:]))),
		Pid:   int(binary.LittleEndian.Uint32(b[8:])),
		Tid:   int(binary.LittleEndian.Uint32(b[12:])),
		Probe: int(binary.LittleEndian.Uint32(b[16:])),
		Addr:  binary.LittleEndian.Uint64(b[24:]),
	}
	for j := range ev.Args {
		ev.Args[j] = binary.LittleEndian.Uint64(b[32+8*j:])
	}
	if binary.LittleEndian.Uint32(b[20:])&flagReturn != 0 {
		ev.Return, ev.Ret, ev.Args = true, ev.Args[0], [6]uint64{}
	}
	if len(b) >= EventRecordSize {
		ev.Goid = binary.LittleEndian.Uint64(b[80:])
	}
	return nil
}
