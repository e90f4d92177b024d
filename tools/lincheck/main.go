// Command lincheck checks a history of a key-value register (recall's get,
// set and delete) for linearizability with Porcupine
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
//
// call and return are nanoseconds on one monotonic clock. A return of null
// is an unknown outcome (a write that timed out or whose connection broke):
// it may have taken effect at any time after its call, or never, so it is
// checked as an operation that returns after everything else. Reads with no
// answer carry no information and belong out of the history.
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
	Found  bool    `json:"found"`
	Call   *int64  `json:"call"`
	Return *int64  `json:"return"`
}

// input is an operation's request; output a read's answer.
type input struct {
	op    string // "get", "set" or "delete"
	key   string
	value string
}

type output struct {
	found bool
	value string
}

// register is one key's state: absent, or holding a value.
type register struct {
	present bool
	value   string
}

var model = porcupine.Model{
	// Keys are independent registers: a history is linearizable iff each
	// key's sub-history is.
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			k := op.Input.(input).key
			if _, seen := byKey[k]; !seen {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return register{} },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		st := state.(register)
		i := in.(input)
		switch i.op {
		case "get":
			o := out.(output)
			return o.found == st.present && (!o.found || o.value == st.value), st
		case "set":
			return true, register{present: true, value: i.value}
		default: // delete
			return true, register{}
		}
	},
	DescribeOperation: func(in, out interface{}) string {
		i := in.(input)
		switch i.op {
		case "get":
			o := out.(output)
			if !o.found {
				return fmt.Sprintf("get(%s) -> miss", i.key)
			}
			return fmt.Sprintf("get(%s) -> %s", i.key, o.value)
		case "set":
			return fmt.Sprintf("set(%s, %s)", i.key, i.value)
		default:
			return fmt.Sprintf("delete(%s)", i.key)
		}
	},
	DescribeState: func(state interface{}) string {
		st := state.(register)
		if !st.present {
			return "absent"
		}
		return st.value
	},
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
		var out output
		switch l.Op {
		case "get":
			if l.Return == nil {
				return nil, 0, bad("a get without a return (leave unanswered reads out)")
			}
			if l.Found {
				if l.Value == nil {
					return nil, 0, bad("a get that found a value without its value")
				}
				out = output{found: true, value: *l.Value}
			}
		case "set":
			if l.Value == nil {
				return nil, 0, bad("a set without a value")
			}
			in.value = *l.Value
		case "delete":
		default:
			return nil, 0, bad(fmt.Sprintf("unknown op %q (get, set or delete)", l.Op))
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
