// Command gort is the Go runtime fixture of the live tests: goroutines that
// return (to runtime.goexit+1), garbage collection, asynchronous preemption
// of tight loops, panics recovered through deferred calls (resumed at the
// deferreturn call), stacks that grow (and are copied) under deep
// recursion, and channels. Its output depends only on its argument,
// so a traced run must print exactly what an untraced one does.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
)

// spin is a loop without calls: only asynchronous preemption stops it.
//
//go:noinline
func spin(n int) int {
	x := 0
	for i := 0; i < n; i++ {
		x = x*31 + i ^ x>>7
	}
	return x
}

// mayPanic panics on every third value; safeDiv recovers.
//
//go:noinline
func mayPanic(i int) int {
	if i%3 == 0 {
		panic(fmt.Sprintf("third %d", i))
	}
	return 100 / (i % 3)
}

//go:noinline
func safeDiv(i int) (r int) {
	defer func() {
		if p := recover(); p != nil {
			r = -len(p.(string))
		}
	}()
	return mayPanic(i)
}

// growDepth is how deep grow recurses in each goroutine.
const growDepth = 150

// grow returns n after recursing n deep with a large frame: a goroutine's
// stack grows, and is copied, several times on the way down.
//
//go:noinline
func grow(n int) int {
	var pad [64]int
	pad[n%64] = n
	if n == 0 {
		return pad[0]
	}
	return grow(n-1) + pad[n%64] - n + 1
}

type node struct {
	next *node
	val  [8]int
}

// churn allocates so that the collector runs.
//
//go:noinline
func churn(n int) int {
	var head *node
	for i := 0; i < n; i++ {
		head = &node{next: head, val: [8]int{i}}
		if i%1000 == 0 {
			head = nil
		}
	}
	s := 0
	for p := head; p != nil; p = p.next {
		s += p.val[0]
	}
	return s
}

func main() {
	rounds := 200
	if len(os.Args) > 1 {
		rounds, _ = strconv.Atoi(os.Args[1])
	}
	runtime.GOMAXPROCS(2)
	results := make(chan string, rounds)
	var wg sync.WaitGroup
	for g := 0; g < rounds; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := spin(20000+g) ^ churn(2000) ^ safeDiv(g) ^ grow(growDepth)
			results <- fmt.Sprintf("%d:%d", g, s)
		}(g)
	}
	// A long loop on the main goroutine, preempted while the others run.
	long := spin(5_000_000)
	wg.Wait()
	close(results)
	var out []string
	for r := range results {
		out = append(out, r)
	}
	sort.Strings(out)
	runtime.GC()
	fmt.Println(len(out), out[0], out[len(out)-1], long)
}
