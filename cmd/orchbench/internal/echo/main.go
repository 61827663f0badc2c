// Command echo is the control-socket baseline of orchbench: a plain Go
// NDJSON echo server on a unix socket. Each connection gets a goroutine that
// reads a line and writes it back. Usage: echo SOCKET. It prints "ready"
// on stdout once it listens and runs until killed.
//
// echo --http is the HTTP API's baseline: a bare net/http server on a
// loopback port that reads each request's body and answers a small JSON
// object, the floor any Go HTTP API pays. It prints "ready ADDR".
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--http" {
		serveHTTP()
		return
	}
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

func serveHTTP() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready", ln.Addr().String())
	body := []byte(`{"key":"k","value":"v","fromNodeId":"local","createdAt":1,"updatedAt":1}`)
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Write(body)
	}))
}
