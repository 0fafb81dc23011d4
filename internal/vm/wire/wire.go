// Package wire is the protocol between the arm64 guest's /init and the
// host that booted it: the job the guest runs (a JSON file in the
// initramfs) and the framed records in which /init sends the command's
// standard output, standard error and exit status back over the serial
// console.
//
// The console also carries whatever the kernel prints, possibly in the
// middle of a line, so every record is one line that starts with a marker,
// numbers itself, carries its payload in base64 and ends with a CRC-32 of
// what precedes it: a record the kernel cut into is detected (its sequence
// number goes missing), never misread. It owns the format only; booting
// and running belong to package guest.
package wire

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// JobPath is where the job file lies in the guest's initramfs.
const JobPath = "/probeopt-job.json"

// A Job is what /init runs once the guest is up.
type Job struct {
	// Args is the command and its arguments; Args[0] is looked up on
	// PATH (busybox's applets) and in Dir.
	Args []string `json:"args"`
	// Env are extra environment variables, "NAME=value".
	Env []string `json:"env,omitempty"`
	// Dir is the working directory the files were put in.
	Dir string `json:"dir"`
}

// Stream names the kind of a record.
type Stream byte

// The record kinds.
const (
	Ready  Stream = 'r' // the first record: the guest is up, the command starts
	Stdout Stream = 'o' // a chunk of the command's standard output
	Stderr Stream = 'e' // a chunk of its standard error
	Exit   Stream = 'x' // the last record: the exit status, in decimal
	Fail   Stream = 'f' // /init could not run the command: the reason
)

// marker starts every record; it is not something a kernel message or a
// program's output starts a line with by chance.
const marker = "@@probeopt-vm "

// MaxChunk is the largest payload of one record, in bytes.
const MaxChunk = 768

// ErrCorrupt is returned by Decoder.Line for a record whose checksum or
// sequence number is wrong: the kernel wrote into it, or a record was lost.
var ErrCorrupt = errors.New("corrupt console record")

// Encode returns record number seq of kind s with payload p (at most
// MaxChunk bytes), a line ending in "\n".
func Encode(seq int, s Stream, p []byte) []byte {
	var b bytes.Buffer
	b.WriteString(marker)
	b.WriteString(strconv.Itoa(seq))
	b.WriteByte(' ')
	b.WriteByte(byte(s))
	b.WriteByte(' ')
	b.WriteString(base64.StdEncoding.EncodeToString(p))
	sum := crc32.ChecksumIEEE(b.Bytes())
	fmt.Fprintf(&b, " %08x\n", sum)
	return b.Bytes()
}

// A Record is one decoded record.
type Record struct {
	Seq     int
	Stream  Stream
	Payload []byte
}

// A Decoder reads records out of console lines and checks that none is
// missing.
type Decoder struct {
	next int
}

// Line decodes one console line (without its line ending). It returns
// ok = false for a line that is not a record (a kernel message), and
// ErrCorrupt for a record that is damaged or out of sequence.
func (d *Decoder) Line(line string) (r Record, ok bool, err error) {
	line = strings.TrimRight(line, "\r\n")
	i := strings.Index(line, marker)
	if i < 0 {
		return Record{}, false, nil
	}
	line = line[i:]
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return Record{}, true, fmt.Errorf("%w: no checksum", ErrCorrupt)
	}
	want, err := strconv.ParseUint(line[sp+1:], 16, 32)
	if err != nil || crc32.ChecksumIEEE([]byte(line[:sp])) != uint32(want) {
		return Record{}, true, fmt.Errorf("%w: checksum of record after %d", ErrCorrupt, d.next-1)
	}
	f := strings.Split(line[len(marker):sp], " ")
	if len(f) != 3 || len(f[1]) != 1 {
		return Record{}, true, fmt.Errorf("%w: %d fields", ErrCorrupt, len(f))
	}
	seq, err := strconv.Atoi(f[0])
	if err != nil {
		return Record{}, true, fmt.Errorf("%w: sequence %q", ErrCorrupt, f[0])
	}
	if seq != d.next {
		return Record{}, true, fmt.Errorf("%w: record %d, want %d", ErrCorrupt, seq, d.next)
	}
	p, err := base64.StdEncoding.DecodeString(f[2])
	if err != nil {
		return Record{}, true, fmt.Errorf("%w: payload of record %d: %w", ErrCorrupt, seq, err)
	}
	d.next++
	return Record{Seq: seq, Stream: Stream(f[1][0]), Payload: p}, true, nil
}
