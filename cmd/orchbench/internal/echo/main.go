// Command echo is the control-socket baseline of orchbench: a plain Go
// NDJSON echo server on a unix socket. Each connection gets a goroutine that
// reads a line and writes it back. Usage: echo SOCKET. It prints "ready"
// on stdout once it listens and runs until killed.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: echo SOCKET")
		os.Exit(2)
	}
	os.Remove(os.Args[1])
	ln, err := net.Listen("unix", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		go serve(c)
	}
}

func serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		if _, err := c.Write(line); err != nil {
			return
		}
	}
}
