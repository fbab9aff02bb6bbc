// Package report is what the interop programs share: the JSON result line the Python
// tests read (the last line of stdout), the record shape in it, and a fatal exit that
// still prints a JSON line saying what failed.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Record is one record as a client delivered it.
type Record struct {
	Partition int32             `json:"p"`
	Offset    int64             `json:"o"`
	Key       string            `json:"k"`
	Value     string            `json:"v"`
	Timestamp int64             `json:"ts"`
	Headers   map[string]string `json:"h,omitempty"`
}

// Print writes the result as one JSON line on stdout.
func Print(result map[string]any) {
	line, err := json.Marshal(result)
	if err != nil {
		Fail("encoding the result", err)
	}
	fmt.Println(string(line))
}

// Fail prints {"error": ...} as the result line and exits with code 1.
func Fail(what string, err error) {
	line, _ := json.Marshal(map[string]any{"error": fmt.Sprintf("%s: %v", what, err)})
	fmt.Println(string(line))
	os.Exit(1)
}

// Check calls Fail when err is not nil.
func Check(what string, err error) {
	if err != nil {
		Fail(what, err)
	}
}

// Logf writes a progress line on stderr, with the time since start.
var start = time.Now()

func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%7.3fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
}

// Value is the value of record i of partition p in a scenario's phase.
func Value(phase string, p int32, i int) string {
	return fmt.Sprintf("%s-%d-%04d", phase, p, i)
}
