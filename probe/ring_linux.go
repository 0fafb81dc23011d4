//go:build linux && (amd64 || arm64)

package probe

import (
	"cmp"
	"encoding/binary"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// With Options.Events, trampolines record each hit in the ring of the
// shared data area (probe id, thread pointer, time stamp counter, the six
// argument registers), and a reader in the tracer turns the records into
// Events while the program runs: no stop, no trap.
//
// The thread pointer is mapped to a thread id through the C library's
// thread control block, which holds the kernel's thread id at a fixed
// offset: the offset is learnt from the threads stopped when the data area
// is made (each thread's id is looked for near its own thread pointer), or
// is the GNU C library's, and every id read is checked to be a thread of
// the process; in a process that never had a second thread, an event whose
// thread pointer leads to no thread id is the process's own. An event
// whose thread cannot be told has Tid 0. The ids found are kept per thread
// pointer until a thread is created (which may reuse the control block of
// one that exited), and a thread on its way out has its unread records'
// threads found before it goes (see threadExiting). The time stamp
// counter is turned into a time against the tracer's own clock and counter
// read together at each drain.
//
// Events are delivered in the order of their time stamp counters, across
// rings and across drains. A drain reads the counter before it reads any
// ring: a record reserved after that has a later count (the slot reads the
// counter after it reserves). The events it read are merged, and only
// those no record still to come can precede are delivered; the others wait
// for the next drain. A record still to come may precede an event when its
// ring holds more records than the drain read (a full batch), or a record
// still being written (reserved, its counter maybe read, not committed):
// such a ring bounds the delivery at the counter of the last record read
// from it, which its later records follow. An event waits at most
// maxHold for a record still being written (a thread killed while writing
// one never commits it), but never for records the reader has yet to read:
// a full batch bounds the delivery however long the reader lags behind the
// threads. Records of the shared ring, where threads without a stripe of
// their own reserve in turn, are in reservation order, which may differ
// from their counters' by the time a record takes to write.

// rdtsc reads the time stamp counter (tsc_linux_GOARCH.s).
func rdtsc() uint64

// ringPoll is how often the reader drains the ring.
const ringPoll = time.Millisecond

// ringBatch is how many records the reader reads from a ring at a time.
const ringBatch = 4096

// maxHold is the longest an event read from a ring waits for the events
// that might precede it.
const maxHold = 100 * time.Millisecond

// sharedRing is the key of the shared ring in ringReader.last.
const sharedRing = -1

// heldKey is the counter of the record at index i of the records held.
type heldKey struct {
	tsc uint64
	i   int
}

// ringReader turns one target's event records into Events.
type ringReader struct {
	tg   *target
	view *trampoline.View

	mu sync.Mutex
	// recs are the records read and not yet delivered, with the thread
	// of each (recTids) and its site (sites; nil for an id no site has, a
	// record that gives no event). The records a drain reads are
	// appended as runs, one per ring, that start at runs (the records
	// held from earlier drains, in counter order, are the first run);
	// order is all of them in counter order (mergeHeld). Events are made
	// from the records only as they are delivered, into out.
	recs    []trampoline.Event
	recTids []int
	recTSC  []uint64 // each record's counter, packed for the merge
	sites   []*ringSite
	runs    []int
	order   []heldKey
	out     []Event
	// spare, spareTids, spareTSC and spareSites take the records kept
	// for the next drain (release).
	spare      []trampoline.Event
	spareTids  []int
	spareTSC   []uint64
	spareSites []*ringSite
	// last is the counter of the last record read from each ring (a
	// stripe's slot, or sharedRing).
	last    map[int]uint64
	slotTid map[int]int // the thread id of each stripe's owner, until it is retired
	tidOff  int         // offset of the thread id from the thread pointer, noTidOffset if unknown
	tids    map[uint64]tidEntry
	known   map[int]bool // the threads the process ever had, as far as seen
	dropped uint64       // the ring's dropped count already added to the tracer's
	tsc0    uint64
	t0      time.Time
	// ids maps a Handler.ID to the probes of its site and the site's
	// address (replaced whole under Tracer.mu: a record read keeps the
	// site it was read for).
	ids map[uint32]*ringSite
}

// tidEntry is the thread id a thread pointer stood for, in the records
// before sequence number until (0: until further notice). A thread
// pointer comes back for another thread when the C library reuses the
// thread control block of a thread that exited, which can only happen
// after a thread is created: each creation closes the open entries at
// the ring's head.
type tidEntry struct {
	tid   int
	until uint64
}

// ringSite is what an event's probe id stands for: the site, its entry
// probes and its return probes.
type ringSite struct {
	addr        uint64
	probes, ret []int
	// atRet are the return probes whose entry records are returns (at a
	// return instruction of a Go function: the first result in Args[0]).
	atRet []int
}

// noTidOffset marks an unknown offset of the thread id (an offset is a
// multiple of 4). glibcTidOffset (arch_linux_GOARCH.go) is tried when no
// offset could be learnt (a program spawned by the tracer has no thread
// pointer yet when its first probes go in).
const noTidOffset = -1

// tidSearch is the size of the window, from tidSearchFrom bytes past the
// thread pointer (arch_linux_GOARCH.go), in which the thread id is looked
// for.
const tidSearch = 0x1000

// newRingReader learns the thread-id offset from the stopped threads and
// starts the reader. The world is stopped.
func (tg *target) newRingReader(w *proc.World, view *trampoline.View) *ringReader {
	rr := &ringReader{tg: tg, view: view, tidOff: noTidOffset, slotTid: map[int]int{}, last: map[int]uint64{},
		tids: map[uint64]tidEntry{}, known: map[int]bool{tg.pid: true}, ids: map[uint32]*ringSite{}, tsc0: rdtsc(), t0: time.Now()}
	rr.tidOff = learnTidOffset(w)
	if ths, err := w.Threads(); err == nil {
		for _, th := range ths {
			rr.known[th.Tid] = true
		}
	}
	tg.t.wg.Add(1)
	go rr.loop()
	return rr
}

// learnTidOffset returns the offset, from the thread pointer, of the
// 32-bit thread id every stopped thread holds there, noTidOffset if none
// is found.
// Where several offsets fit, the smallest wins.
func learnTidOffset(w *proc.World) int {
	ths, err := w.Threads()
	if err != nil {
		return noTidOffset
	}
	var fit map[int]bool
	for _, th := range ths {
		r, err := w.Regs(th.Tid)
		if err != nil || threadBase(&r) == 0 {
			continue
		}
		b := make([]byte, tidSearch)
		if w.ReadMemory(uint64(int64(threadBase(&r))+tidSearchFrom), b) != nil {
			continue
		}
		here := map[int]bool{}
		for i := 0; i+4 <= len(b); i += 4 {
			off := i + tidSearchFrom
			if int(binary.LittleEndian.Uint32(b[i:])) == th.Tid && (fit == nil || fit[off]) {
				here[off] = true
			}
		}
		fit = here
	}
	best := noTidOffset
	for off := range fit {
		if best == noTidOffset || off < best {
			best = off
		}
	}
	return best
}

// setSites replaces the map of probe ids (under Tracer.mu).
func (rr *ringReader) setSites(sites map[uint64]*liveSite) {
	ids := map[uint32]*ringSite{}
	for _, s := range sites {
		if s.tramp == nil {
			continue
		}
		rs := ringSite{addr: s.addr}
		for _, r := range s.refs {
			switch {
			case r.p.internal || r.p.removed:
			case r.c.atRet:
				rs.atRet = append(rs.atRet, r.p.ID)
			case r.p.sp.ret:
				rs.ret = append(rs.ret, r.p.ID)
			default:
				rs.probes = append(rs.probes, r.p.ID)
			}
		}
		ids[uint32(s.tramp.counter)] = &rs
	}
	rr.mu.Lock()
	rr.ids = ids
	rr.mu.Unlock()
}

// threadStarted records a new thread of the process: the thread ids
// known so far hold for the records reserved until now (the new thread
// may have the thread pointer of one that exited).
func (rr *ringReader) threadStarted(tid int) {
	rr.mu.Lock()
	rr.known[tid] = true
	head := rr.view.Head()
	for tp, e := range rr.tids {
		if e.until == 0 {
			rr.tids[tp] = tidEntry{tid: e.tid, until: head}
		}
	}
	rr.mu.Unlock()
}

// threadExiting is called while a thread is stopped on its way out, its
// thread id still in its thread control block: it drains the ring, and
// finds the thread of every record it could not read yet (behind a record
// another thread is still writing), which may be the exiting thread's.
func (rr *ringReader) threadExiting() {
	rr.drain()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	pending := rr.view.Pending()
	if pending == 0 {
		return
	}
	buf := make([]trampoline.Event, min(pending, uint64(rr.view.RingRecords)))
	n := rr.view.Peek(buf)
	for _, rec := range buf[:n] {
		rr.tid(rec.Thread, rec.Seq)
	}
}

// loop drains the ring until the target is gone.
func (rr *ringReader) loop() {
	defer rr.tg.t.wg.Done()
	tick := time.NewTicker(ringPoll)
	defer tick.Stop()
	for {
		select {
		case <-rr.tg.gone:
			return
		case <-tick.C:
			rr.drain()
		}
	}
}

// drain reads the complete records of the shared ring and of every
// thread's ring, in batches, and delivers the events that no record still
// to come can precede, in time order (Options.OnEvents, or the Events
// channel). It reads about one full ring
// of each at most, and holds the lock for one batch at a time: threads
// that record faster than the tracer reads lose events (counted dropped),
// and the tracer's work that waits for the lock (a thread that starts or
// exits, while the event loop holds every process) waits for one batch,
// not for as long as the threads keep recording.
func (rr *ringReader) drain() {
	rounds := 1 + max(rr.view.RingRecords, rr.tg.t.opts.RingSize)/ringBatch
	for i := 0; i < rounds && rr.drainBatch(); i++ {
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if d := rr.view.Dropped(); d > rr.dropped {
		rr.tg.t.dropped.Add(d - rr.dropped)
		rr.dropped = d
	}
}

// drainFinal drains the rings and delivers every event read, waiting for
// nothing: no record is still to come (the process exited or exec'd).
func (rr *ringReader) drainFinal() {
	rr.drain()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.release(len(rr.order), rr.clock())
}

// drainBatch reads one batch of records of each ring and delivers the
// events that no record still to come can precede, and reports whether
// a ring filled the batch (more may be waiting).
func (rr *ringReader) drainBatch() (more bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	conv := rr.clock()
	bound := deliveryBound{writing: conv.tsc, unread: conv.tsc}
	rr.runs = append(rr.runs[:0], 0)
	start, n := rr.readRun(sharedRing)
	for i := start; i < start+n; i++ {
		rr.recTids = append(rr.recTids, rr.tid(rr.recs[i].Thread, rr.recs[i].Seq))
	}
	more = n == ringBatch
	bound.ring(rr.last[sharedRing], n == ringBatch, rr.view.Pending() > 0)
	for _, st := range rr.view.Stripes() {
		_, n := rr.readRun(st.Slot)
		if n > 0 {
			tid := rr.stripeTid(st)
			for range n {
				rr.recTids = append(rr.recTids, tid)
			}
		}
		more = more || n == ringBatch
		bound.ring(rr.last[st.Slot], n == ringBatch, rr.view.ThreadPending(st.Slot) > 0)
	}
	rr.mergeHeld()
	var hold uint64
	if conv.perNs > 0 {
		hold = uint64(conv.perNs * float64(maxHold.Nanoseconds()))
	}
	limit := bound.limit(conv.tsc, hold)
	ready, _ := slices.BinarySearchFunc(rr.order, limit+1, func(k heldKey, t uint64) int { return cmp.Compare(k.tsc, t) })
	rr.release(ready, conv)
	return more
}

// clock reads the tracer's clock and the time stamp counter together
// (under rr.mu).
func (rr *ringReader) clock() tscClock {
	now, tsc := time.Now(), rdtsc()
	perNs := counterPerNs()
	if el := now.Sub(rr.t0); perNs <= 0 && el > 0 && tsc > rr.tsc0 {
		perNs = float64(tsc-rr.tsc0) / float64(el.Nanoseconds())
	}
	return newTSCClock(now.UnixNano(), tsc, perNs)
}

// readRun reads a batch of records of ring slot (a stripe's, or
// sharedRing) into a new run of those held, with the site of each, and
// returns where they start and how many there are (under rr.mu).
func (rr *ringReader) readRun(slot int) (start, n int) {
	start = len(rr.recs)
	rr.recs = slices.Grow(rr.recs, ringBatch)
	dst := rr.recs[start : start+ringBatch]
	if slot == sharedRing {
		n = rr.view.Read(dst)
	} else {
		n = rr.view.ReadThread(slot, dst)
	}
	rr.recs = rr.recs[:start+n]
	if n == 0 {
		return start, 0
	}
	rr.runs = append(rr.runs, start)
	rr.last[slot] = rr.recs[start+n-1].TSC
	// A ring's records come in long stretches of one probe id.
	id, site := rr.recs[start].Probe, rr.ids[rr.recs[start].Probe]
	for i := start; i < start+n; i++ {
		if p := rr.recs[i].Probe; p != id {
			id, site = p, rr.ids[p]
		}
		rr.sites = append(rr.sites, site)
		rr.recTSC = append(rr.recTSC, rr.recs[i].TSC)
	}
	return start, n
}

// deliveryBound is the latest counter a drain may deliver up to: every
// record still to come has a later one.
type deliveryBound struct {
	// writing is the last counter read from a ring whose next record may
	// still be being written; unread, the last counter read from a ring
	// that filled the batch (its next records are complete, only not
	// read yet).
	writing, unread uint64
}

// ring bounds the delivery by a ring whose last record read has counter
// last: full, the read filled the batch; pending, the ring has records
// reserved and not read.
func (b *deliveryBound) ring(last uint64, full, pending bool) {
	switch {
	case full:
		b.unread = min(b.unread, last)
	case pending:
		b.writing = min(b.writing, last)
	}
}

// limit is the bound when the drain read the counter tsc and a record
// being written is waited for hold ticks at most (0: for ever).
func (b deliveryBound) limit(tsc, hold uint64) uint64 {
	writing := b.writing
	if hold > 0 && tsc > hold {
		writing = max(writing, tsc-hold)
	}
	return min(writing, b.unread)
}

// mergeHeld puts the records held in the order of their counters, in
// rr.order, records of equal counters in the order they were read (under
// rr.mu). Each run (rr.runs) is in order already, but for a signal
// handler's hit during a record's writing, which inverts two records of
// one ring: the runs are merged, and sorted only when one of them is out
// of order.
func (rr *ringReader) mergeHeld() {
	tscs, runs := rr.recTSC, rr.runs
	order := slices.Grow(rr.order[:0], len(tscs))
	var head, end [8]int
	sorted := len(runs) <= len(head)
	for r := 0; sorted && r < len(runs); r++ {
		head[r], end[r] = runs[r], len(tscs)
		if r+1 < len(runs) {
			end[r] = runs[r+1]
		}
		for i := head[r] + 1; sorted && i < end[r]; i++ {
			sorted = tscs[i-1] <= tscs[i]
		}
	}
	if !sorted {
		for i, t := range tscs {
			order = append(order, heldKey{t, i})
		}
		slices.SortFunc(order, func(a, b heldKey) int {
			if c := cmp.Compare(a.tsc, b.tsc); c != 0 {
				return c
			}
			return cmp.Compare(a.i, b.i)
		})
		rr.order = order
		return
	}
	// k-way merge: the next record is the smallest head; the earlier run
	// wins a tie (records are read in order of their rings).
	nr := len(runs)
	for {
		best, bt := -1, uint64(0)
		for r := 0; r < nr; r++ {
			if head[r] < end[r] {
				if t := tscs[head[r]]; best < 0 || t < bt {
					best, bt = r, t
				}
			}
		}
		if best < 0 {
			break
		}
		order = append(order, heldKey{bt, head[best]})
		head[best]++
	}
	rr.order = order
}

// deliverChunk is how many events a delivery hands over at most: the
// events are made into memory the consumer reads while it is still in
// the cache, and the next chunk is made into the same.
const deliverChunk = 256

// release delivers the events of the first n records of rr.order, made
// with conv, in chunks, and keeps the others, in order, for the next
// drain (under rr.mu).
func (rr *ringReader) release(n int, conv tscClock) {
	out := rr.out[:0]
	for _, k := range rr.order[:n] {
		if site := rr.sites[k.i]; site != nil {
			out = rr.emit(out, &rr.recs[k.i], rr.recTids[k.i], site, conv)
			if len(out) >= deliverChunk {
				rr.deliver(out)
				out = out[:0]
			}
		}
	}
	if len(out) > 0 {
		rr.deliver(out)
	}
	rr.out = out[:0]
	spare, tids, tscs, sites := rr.spare[:0], rr.spareTids[:0], rr.spareTSC[:0], rr.spareSites[:0]
	for _, k := range rr.order[n:] {
		spare, tids, tscs, sites = append(spare, rr.recs[k.i]), append(tids, rr.recTids[k.i]), append(tscs, k.tsc), append(sites, rr.sites[k.i])
	}
	rr.spare, rr.spareTids, rr.spareTSC, rr.spareSites = rr.recs, rr.recTids[:0], rr.recTSC[:0], rr.sites[:0]
	rr.recs, rr.recTids, rr.recTSC, rr.sites = spare, tids, tscs, sites
	rr.order = rr.order[:0]
}

// tscClock turns time stamp counter readings into wall-clock times: now
// (Unix nanoseconds) was read together with tsc, and the counter runs
// perNs ticks per nanosecond (0 when not known yet: every event gets now).
type tscClock struct {
	now     int64
	tsc     uint64
	perNs   float64
	nsPerTk float64 // 1/perNs, 0 with it
}

func newTSCClock(now int64, tsc uint64, perNs float64) tscClock {
	c := tscClock{now: now, tsc: tsc, perNs: perNs}
	if perNs > 0 {
		c.nsPerTk = 1 / perNs
	}
	return c
}

func (c tscClock) at(tsc uint64) time.Time {
	if c.nsPerTk == 0 || tsc > c.tsc {
		return time.Unix(0, c.now)
	}
	return time.Unix(0, c.now-int64(float64(c.tsc-tsc)*c.nsPerTk))
}

// emit appends to out the events of record rec, read from the ring of
// thread tid for site, and returns it.
func (rr *ringReader) emit(out []Event, rec *trampoline.Event, tid int, site *ringSite, conv tscClock) []Event {
	ids, ret := site.probes, rec.Kind == trampoline.EventReturn
	if ret {
		ids = site.ret
	}
	at := conv.at(rec.TSC)
	var goid uint64
	if rec.Go {
		// The thread is the goroutine's m's (gothread.go); a hit without
		// an m keeps the thread the thread pointer gave.
		if rec.GoTid != 0 {
			tid = int(rec.GoTid)
		}
		goid = rec.Goid
	}
	ev := Event{Pid: rr.tg.pid, Tid: tid, Addr: site.addr, Time: at, Return: ret, Goid: goid}
	if ret {
		ev.Ret = rec.Ret
	} else {
		ev.Args = rec.Args
	}
	for _, id := range ids {
		ev.Probe = id
		out = append(out, ev)
	}
	if !ret {
		for _, id := range site.atRet {
			out = append(out, Event{Probe: id, Pid: rr.tg.pid, Tid: tid, Addr: site.addr, Time: at, Return: true, Ret: rec.Args[0], Goid: goid})
		}
	}
	return out
}

// deliver hands a batch to Options.OnEvents, or sends its events on the
// Events channel (counting those that find it full).
func (rr *ringReader) deliver(evs []Event) {
	t := rr.tg.t
	if t.opts.OnEvents != nil {
		t.opts.OnEvents(evs)
		return
	}
	for _, ev := range evs {
		select {
		case t.events <- ev:
		default:
			t.dropped.Add(1)
		}
	}
}

// stripeTid returns the thread id of the owner of stripe st (under rr.mu),
// 0 if it cannot be told.
func (rr *ringReader) stripeTid(st trampoline.Stripe) int {
	if id, ok := rr.slotTid[st.Slot]; ok {
		return id
	}
	id := rr.tg.tcbTid(st.Key, rr.tidOff, rr.known)
	if id == 0 && !rr.tg.multi.Load() {
		id = rr.tg.pid
	}
	if id != 0 {
		rr.slotTid[st.Slot] = id
	}
	return id
}

// retired forgets the owner of a stripe that was retired (under rr.mu).
func (rr *ringReader) retired(slot int) {
	delete(rr.slotTid, slot)
	delete(rr.last, slot)
}

// tid returns the thread id behind thread pointer tp in the record of
// sequence number seq, 0 if unknown (under rr.mu).
func (rr *ringReader) tid(tp, seq uint64) int {
	if e, ok := rr.tids[tp]; ok && (e.until == 0 || seq < e.until) {
		return e.tid
	}
	id := rr.tg.tcbTid(tp, rr.tidOff, rr.known)
	if id != 0 {
		rr.tids[tp] = tidEntry{tid: id}
		return id
	}
	// Not from the thread control block: in a process that never had a
	// second thread, the process's own. (Looked at last: a new thread
	// may record events before the tracer has seen it start.)
	if !rr.tg.multi.Load() {
		return rr.tg.pid
	}
	return 0
}

// tcbTid reads the thread id that the thread control block at thread
// pointer tp holds, at offset tidOff (unless noTidOffset) or at the GNU C
// library's; it returns 0 unless the id is in known or a thread of the
// process.
func (tg *target) tcbTid(tp uint64, tidOff int, known map[int]bool) int {
	f := tg.mem.Load()
	if f == nil {
		return 0
	}
	for _, off := range []int{tidOff, glibcTidOffset} {
		if off == noTidOffset {
			continue
		}
		var b [4]byte
		if _, err := f.ReadAt(b[:], int64(tp)+int64(off)); err == nil {
			if cand := int(binary.LittleEndian.Uint32(b[:])); known[cand] || cand > 0 && isTask(tg.pid, cand) {
				return cand
			}
		}
	}
	return 0
}

// threadExit runs on the tracer thread while thread tid is stopped on
// its way out: the rings are drained (its thread id is still in its
// thread control block, which finds the thread of its records), and the
// stripes it held are retired: their counts go to the shared words, the
// events they dropped are kept under the thread's id, and the stripes are
// free for the threads to come.
func (tg *target) threadExit(tid int) {
	rr := tg.ring.Load()
	if rr != nil {
		rr.threadExiting()
	}
	ts := tg.live.Load()
	if ts == nil || ts.view.ThreadSlots() == 0 {
		return
	}
	for _, st := range ts.view.Stripes() {
		if tg.tcbTid(st.Key, ts.tidOff, map[int]bool{tid: true}) != tid {
			continue
		}
		if rr != nil {
			rr.mu.Lock()
		}
		d := ts.view.ThreadDropped(st.Slot)
		lost, err := ts.view.Retire(st.Slot)
		if rr != nil {
			rr.retired(st.Slot)
			rr.mu.Unlock()
		}
		if err == nil && d+lost > 0 {
			ts.dropsMu.Lock()
			ts.drops[tid] += d + lost
			ts.dropsMu.Unlock()
		}
	}
}

// isTask reports whether tid is a thread of process pid.
func isTask(pid, tid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid))
	return err == nil
}
