// Command gothreads is the fixture of the tests of Go events' thread and
// goroutine ids: goroutines locked to their threads (runtime.LockOSThread)
// and goroutines that roam between threads each call main.work a known
// number of times, under garbage collection and stack growth, and print
// their own kernel thread id (syscall.Gettid, for a locked one) and their
// goroutine id (runtime.Stack's "goroutine N" line).
//
// Usage: gothreads WORKERS CALLS
package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// countIn and countSep make work call bytes.Count, which calls the
// assembly of internal/bytealg (Go's stack-based ABI0) once per call.
var countIn, countSep = []byte("probeopt"), []byte("b")

// work is the probed function: its arguments name the caller and the call,
// its result is unique to both.
//
//go:noinline
func work(worker, call int) int {
	if bytes.Count(countIn, countSep) != 1 {
		panic("bytes.Count")
	}
	if call%16 == 0 {
		return grow(call%40) + worker*1_000_000 + call - call%40
	}
	return worker*1_000_000 + call
}

// grow recurses deep enough to make the goroutine's stack grow (and be
// copied) and returns n.
//
//go:noinline
func grow(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return grow(n-1) + 1 + int(pad[n%256]) - int(byte(n))
}

// goid returns the id of the calling goroutine, as runtime.Stack prints it.
func goid() int {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		n, err := strconv.Atoi(string(b[:i]))
		if err == nil {
			return n
		}
	}
	return -1
}

var sink [][]byte

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gothreads WORKERS CALLS")
		os.Exit(2)
	}
	workers, _ := strconv.Atoi(os.Args[1])
	calls, _ := strconv.Atoi(os.Args[2])
	lines := make([]string, 2*workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	// The roaming goroutines start working once every locked one holds
	// its thread: a locked thread then runs work for its goroutine only.
	var locked sync.WaitGroup
	locked.Add(workers)
	for i := 0; i < 2*workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			isLocked := i < workers
			if isLocked {
				// Never unlocked: the runtime ends the thread with the
				// goroutine, so no other goroutine ever runs on it.
				runtime.LockOSThread()
				locked.Done()
			} else {
				locked.Wait()
			}
			tid := syscall.Gettid()
			sum := 0
			for k := 0; k < calls; k++ {
				sum += work(i, k)
				if k%32 == 0 {
					mu.Lock()
					sink = append(sink, make([]byte, 64<<10))
					if len(sink) > 64 {
						sink = sink[:0]
					}
					mu.Unlock()
					runtime.Gosched()
				}
			}
			if !isLocked {
				tid = 0 // a roaming goroutine has no one thread
			}
			lines[i] = fmt.Sprintf("worker %d locked %t tid %d goid %d sum %d", i, isLocked, tid, goid(), sum)
		}(i)
	}
	wg.Wait()
	for _, l := range lines {
		fmt.Println(l)
	}
}
