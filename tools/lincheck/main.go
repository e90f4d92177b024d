// Command lincheck checks a history of a key-value register (recall's get,
// gets, set, delete, append, incr, decr and cas) for linearizability with Porcupine
// (github.com/anishathalye/porcupine), an existing checker: this program
// only reads the history and states the register's sequential model.
//
//	lincheck [-timeout 60s] [-html FILE] HISTORY.jsonl
//
// HISTORY.jsonl holds one operation per line:
//
//	{"client":0,"op":"set","key":"k1","value":"v17","call":123,"return":456}
//	{"client":1,"op":"get","key":"k1","found":true,"value":"v17","call":130,"return":400}
//	{"client":2,"op":"set","key":"k2","value":"v18","call":140,"return":null}
//	{"client":3,"op":"delete","key":"k1","found":true,"call":150,"return":420}
//
// call and return are nanoseconds on one monotonic clock. A return of null
// is an unknown outcome (a write that timed out or whose connection broke):
// it may have taken effect at any time after its call, or never, so it is
// checked as an operation that returns after everything else. Reads with no
// answer carry no information and belong out of the history.
//
// A delete's "found" is its answer (true: DELETED, false: NOT_FOUND) and is
// checked like a read's: a NOT_FOUND after an acknowledged set, with nothing
// in between, is a lost write even when no read follows. A delete without
// "found" (or with an unknown outcome) may have found either.
//
// The other writes carry their answer in "outcome":
//
//	{"client":4,"op":"append","key":"k1","value":"+a","outcome":"stored","call":1,"return":2}
//	{"client":5,"op":"incr","key":"k2","delta":3,"outcome":"value","value":"45","call":1,"return":2}
//	{"client":6,"op":"gets","key":"k1","found":true,"value":"v17","cas":812,"call":1,"return":2}
//	{"client":6,"op":"cas","key":"k1","value":"v19","cas":812,"outcome":"exists","call":3,"return":4}
//
// append: stored / not_stored; incr and decr: value (the new number in
// "value") / not_found / non_numeric; cas: stored / exists / not_found.
// An append, incr, decr or cas whose reply was lost (return null) may
// have applied or not. The model (model.go) assumes what recall
// guarantees of cas tokens: each write draws a new one, larger than every
// token drawn before it.
//
// Exit status: 0 linearizable, 1 not linearizable (with -html, Porcupine's
// visualization of the longest linearizable prefixes is written there),
// 2 bad input or the checker ran out of time (no verdict).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

// line is one operation as the history file spells it.
type line struct {
	Client int     `json:"client"`
	Op     string  `json:"op"`
	Key    string  `json:"key"`
	Value  *string `json:"value"`
	Found  *bool   `json:"found"`
	// incr/decr's delta; gets's answer and cas's request: the cas token.
	Delta *uint64 `json:"delta"`
	Cas   *uint64 `json:"cas"`
	// The answer of append, incr/decr and cas (see output.outcome).
	Outcome *string `json:"outcome"`
	Call    *int64  `json:"call"`
	Return  *int64  `json:"return"`
}

// readHistory parses path; an error names the file and line.
func readHistory(path string) (ops []porcupine.Operation, unknown int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var latest int64
	var pending []int // operations with an unknown outcome
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, 0, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		bad := func(why string) error { return fmt.Errorf("%s:%d: %s", path, n, why) }
		if l.Call == nil {
			return nil, 0, bad("no call time")
		}
		if l.Client < 0 {
			return nil, 0, bad("client is negative")
		}
		in := input{op: l.Op, key: l.Key}
		out := output{known: l.Return != nil}
		outcome := func(allowed ...string) error {
			if !out.known {
				return nil // no answer, whatever the line says
			}
			if l.Outcome == nil {
				return bad(fmt.Sprintf("a %s without its outcome", l.Op))
			}
			for _, a := range allowed {
				if *l.Outcome == a {
					out.outcome = a
					return nil
				}
			}
			return bad(fmt.Sprintf("a %s's outcome is one of %v, not %q", l.Op, allowed, *l.Outcome))
		}
		var err error
		switch l.Op {
		case "get", "gets":
			if l.Return == nil {
				return nil, 0, bad("a " + l.Op + " without a return (leave unanswered reads out)")
			}
			if l.Found != nil && *l.Found {
				if l.Value == nil {
					return nil, 0, bad("a " + l.Op + " that found a value without its value")
				}
				out.found, out.value = true, *l.Value
				if l.Op == "gets" {
					if l.Cas == nil || *l.Cas == 0 {
						return nil, 0, bad("a gets that found a value without its cas token")
					}
					out.token = *l.Cas
				}
			}
		case "set", "append":
			if l.Value == nil {
				return nil, 0, bad("a " + l.Op + " without a value")
			}
			in.value = *l.Value
			if l.Op == "append" {
				err = outcome("stored", "not_stored")
			}
		case "delete":
			// An unknown outcome has no answer, whatever the line says.
			if l.Found != nil && out.known {
				out.outcome = "not_found"
				if *l.Found {
					out.outcome = "deleted"
				}
			}
		case "incr", "decr":
			if l.Delta == nil {
				return nil, 0, bad("an " + l.Op + " without a delta")
			}
			in.delta = *l.Delta
			if err = outcome("value", "not_found", "non_numeric"); err == nil && out.outcome == "value" {
				if l.Value == nil {
					return nil, 0, bad("an " + l.Op + " that answered a number without it")
				}
				out.value = *l.Value
			}
		case "cas":
			if l.Value == nil || l.Cas == nil || *l.Cas == 0 {
				return nil, 0, bad("a cas without a value or its token")
			}
			in.value, in.token = *l.Value, *l.Cas
			err = outcome("stored", "exists", "not_found")
		default:
			return nil, 0, bad(fmt.Sprintf("unknown op %q (get, gets, set, delete, append, incr, decr or cas)", l.Op))
		}
		if err != nil {
			return nil, 0, err
		}
		op := porcupine.Operation{ClientId: l.Client, Input: in, Call: *l.Call, Output: out}
		if *l.Call > latest {
			latest = *l.Call
		}
		if l.Return == nil {
			pending = append(pending, len(ops))
		} else {
			if *l.Return < *l.Call {
				return nil, 0, bad("returns before its call")
			}
			op.Return = *l.Return
			if *l.Return > latest {
				latest = *l.Return
			}
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("%s: %v", path, err)
	}
	// An unknown outcome may take effect at any moment after its call:
	// it returns after every known event.
	for _, i := range pending {
		ops[i].Return = latest + 1
	}
	return ops, len(pending), nil
}

func main() {
	timeout := flag.Duration("timeout", time.Minute, "give up (exit 2) after this long")
	html := flag.String("html", "", "on a violation, write Porcupine's visualization here")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: lincheck [-timeout D] [-html FILE] HISTORY.jsonl\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	path := flag.Arg(0)
	ops, unknown, err := readHistory(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lincheck: %v\n", err)
		os.Exit(2)
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, *timeout)
	summary := fmt.Sprintf("%d operations (%d with unknown outcome) from %s", len(ops), unknown, path)
	switch res {
	case porcupine.Ok:
		fmt.Printf("lincheck: linearizable: %s\n", summary)
	case porcupine.Illegal:
		fmt.Printf("lincheck: NOT linearizable: %s\n", summary)
		if *html != "" {
			if err := porcupine.VisualizePath(model, info, *html); err != nil {
				fmt.Fprintf(os.Stderr, "lincheck: writing %s: %v\n", *html, err)
			} else {
				fmt.Printf("lincheck: visualization in %s\n", *html)
			}
		}
		os.Exit(1)
	default:
		fmt.Printf("lincheck: no verdict within %v: %s\n", *timeout, summary)
		os.Exit(2)
	}
}
