// Command hello is the program orchbench restarts under each classic
// supervisor and under its own bare fork/exec floor: it connects to a unix
// socket, says "hello PID", and stays until the socket closes. It does
// nothing else, so its start-up is the floor any supervised program pays.
//
// The socket is its first argument, or "hello.sock" in the directory that
// argument names (s6-supervise passes the service directory), or
// "hello.sock" in the working directory (so a supervisor's service
// directory can run it as ./run).
package main

import (
	"net"
	"os"
	"strconv"
)

func main() {
	path := "hello.sock"
	if len(os.Args) > 1 {
		path = os.Args[1]
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			path += "/hello.sock"
		}
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		os.Exit(1)
	}
	if _, err := c.Write([]byte("hello " + strconv.Itoa(os.Getpid()) + "\n")); err != nil {
		os.Exit(1)
	}
	var buf [64]byte
	for {
		if _, err := c.Read(buf[:]); err != nil {
			os.Exit(0)
		}
	}
}
