package trampoline_test

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/probeopt/probeopt/trampoline"
	"github.com/probeopt/probeopt/trampoline/internal/native"
)

// TestNativeGoFields runs a slot with Handler.Go on the CPU with r14
// pointing at a g laid out as the offsets say (or at nothing): the event
// holds the g's goid and its m's procid, 0 for what is missing, and every
// register comes back as it was.
func TestNativeGoFields(t *testing.T) {
	e := newEnv(t, envOptions{ring: 16})
	gog := &trampoline.GoG{M: 0x30, Goid: 0x98, Procid: 0x40}
	e.install(e.site("args6", nil), trampoline.Handler{ID: 9, Event: true, ArgRegs: trampoline.GoArgs, Go: gog})
	stack := e.stack()
	m := make([]uint64, 64)
	m[0x40/8] = 4242
	gWithM := make([]uint64, 64)
	gWithM[0x30/8] = uint64(uintptr(unsafe.Pointer(&m[0])))
	gWithM[0x98/8] = 17
	gNoM := make([]uint64, 64)
	gNoM[0x98/8] = 18
	for _, c := range []struct {
		name      string
		r14       uint64
		tid, goid uint64
	}{
		{"g and m", uint64(uintptr(unsafe.Pointer(&gWithM[0]))), 4242, 17},
		{"g without m", uint64(uintptr(unsafe.Pointer(&gNoM[0]))), 0, 18},
		{"no g", 0, 0, 0},
	} {
		var r native.Regs
		for i := range r.GPR {
			r.GPR[i] = 0x1111_0000 + uint64(i)
		}
		r.GPR[14] = c.r14
		r.GPR[0] = 5 // rax: Go's first argument
		got := e.call("args6", r, stack)
		var evs [4]trampoline.Event
		if n := e.view.Read(evs[:]); n != 1 {
			t.Fatalf("%s: %d events, want 1", c.name, n)
		}
		ev := evs[0]
		if !ev.Go || ev.GoTid != c.tid || ev.Goid != c.goid || ev.Kind != trampoline.EventEntry || ev.Probe != 9 || ev.Args[0] != 5 {
			t.Errorf("%s: event %+v, want Go thread %d goroutine %d", c.name, ev, c.tid, c.goid)
		}
		if got.GPR[14] != c.r14 {
			t.Errorf("%s: r14 %#x after the call, was %#x", c.name, got.GPR[14], c.r14)
		}
		runtime.KeepAlive(m)
		runtime.KeepAlive(gWithM)
		runtime.KeepAlive(gNoM)
	}
	// A handler without Go records no Go fields.
	e2 := newEnv(t, envOptions{ring: 16})
	e2.install(e2.site("args6", nil), trampoline.Handler{ID: 10, Event: true})
	var r native.Regs
	e2.call("args6", r, e2.stack())
	var evs [4]trampoline.Event
	if n := e2.view.Read(evs[:]); n != 1 || evs[0].Go || evs[0].GoTid != 0 || evs[0].Goid != 0 || evs[0].Kind != trampoline.EventEntry {
		t.Errorf("plain handler: %d events, %+v", n, evs[0])
	}
	// Offsets a g cannot have are refused.
	if _, err := e.area.BuildX86(e.site("args6", nil), &trampoline.Handler{ID: 11, Event: true, Go: &trampoline.GoG{M: 3}}, e.cfg); err == nil {
		t.Error("an offset of 3 was accepted")
	}
}
