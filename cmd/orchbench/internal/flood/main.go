// Command flood is the executor scenario's baseline: it writes N
// report_message notifications, one JSON-RPC line each, to stdout as fast
// as it can, the same lines an executor sends the daemon. orchbench reads
// and decodes them on the other end of the pipe. Usage: flood N.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: flood N")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "flood: N must be a positive number")
		os.Exit(2)
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(w, `{"jsonrpc":"2.0","method":"report_message","params":{"session_token":"%s","task_id":"t-bench","sequence":%d,"timestamp":%d,"event_type":"content_block_delta","event_data":{"delta":{"text":"chunk %d of the agent's streamed answer"}}}}`+"\n",
			"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", i, time.Now().UnixMilli(), i)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		os.Exit(1)
	}
}
