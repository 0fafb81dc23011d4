// Command guestinit is the /init of the arm64 guest that package guest
// boots: a static Go program (GOARCH=arm64 CGO_ENABLED=0, built by the
// runner) that mounts proc, sys, devtmpfs, tracefs and debugfs, installs
// busybox's applet links, runs the job's command as root in its working
// directory, sends the command's output and exit status to the host as
// wire records on the console, and powers the machine off. It never
// exits: the kernel would panic.
//
// It does nothing outside a guest: on any other system it only says so.
package main
