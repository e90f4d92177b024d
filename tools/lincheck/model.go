package main

import (
	"fmt"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// input is an operation's request.
type input struct {
	op    string // get, gets, set, delete, append, incr, decr or cas
	key   string
	value string // set's and cas's value, append's suffix
	delta uint64 // incr's and decr's
	token uint64 // cas's token (from an earlier gets)
}

// output is an operation's answer. A write whose outcome is unknown (its
// reply was lost) has known == false and may have applied or not.
type output struct {
	known bool
	// get, gets: whether the key held a value, and which.
	found bool
	value string
	// gets: the item's cas token.
	token uint64
	// delete: "deleted" / "not_found" / "" (not told);
	// append: "stored" / "not_stored"; cas: "stored" / "exists" /
	// "not_found"; incr/decr: "value" (the new number is in value) /
	// "not_found" / "non_numeric".
	outcome string
}

// register is one key's state: absent, or holding a value. tok is the
// current value's cas token once an answer told it (0: not known yet).
// Tokens are drawn in log order, so every write's token is larger than
// all tokens drawn before it: floor is the largest token known to belong
// to a write that has been replaced, and the current value's token,
// whatever it is, is above it. That is what lets a model that never sees
// a set's token decide whether a cas with an old token may have
// succeeded.
type register struct {
	present bool
	value   string
	tok     uint64
	floor   uint64
}

// written is the state after a write that stores value: a new token, not
// yet known, above every token seen so far.
func (st register) written(value string) register {
	return register{present: true, value: value, floor: max64(st.floor, st.tok)}
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// tokenMayBe says whether the current value's token may be t.
func (st register) tokenMayBe(t uint64) bool {
	if st.tok != 0 {
		return st.tok == t
	}
	return t > st.floor
}

// parseCounter reads a value as incr/decr do (recall-store's
// parse_u64_like_strtoull, after memcached's safe_strtoull): optional
// leading white space, an optional sign, decimal digits, then the end or
// white space; a negative number is refused.
func parseCounter(v string) (uint64, bool) {
	isSpace := func(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }
	i := 0
	for i < len(v) && isSpace(v[i]) {
		i++
	}
	neg := false
	if i < len(v) && (v[i] == '+' || v[i] == '-') {
		neg = v[i] == '-'
		i++
	}
	start := i
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	if i == start || (i < len(v) && !isSpace(v[i])) {
		return 0, false
	}
	n, err := strconv.ParseUint(v[start:i], 10, 64)
	if err != nil {
		return 0, false
	}
	if neg {
		r := -n
		if int64(r) < 0 {
			return 0, false
		}
		return r, true
	}
	return n, true
}

// arith is incr/decr on a present value: the new number and the bytes
// stored (a number no longer than the old value is written over it and
// padded with spaces, as memcached does).
func arith(old string, incr bool, delta uint64) (uint64, string, bool) {
	cur, ok := parseCounter(old)
	if !ok {
		return 0, "", false
	}
	n := cur + delta // wraps, as memcached's incr does
	if !incr {
		n = 0
		if cur > delta {
			n = cur - delta
		}
	}
	digits := strconv.FormatUint(n, 10)
	if len(digits) <= len(old) {
		digits += spaces(len(old) - len(digits))
	}
	return n, digits, true
}

func spaces(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = ' '
	}
	return string(b)
}

// apply is the write's effect when it applies: the next state, or false if
// the write cannot have applied in st. For a write with a known outcome
// the output must match; for an unknown one, any outcome that changes the
// state is taken (one that does not is the same as never applying).
func apply(st register, i input, o output) (register, bool) {
	switch i.op {
	case "set":
		return st.written(i.value), true
	case "delete":
		// outcome: "deleted", "not_found", or "" (not told: either).
		if (o.outcome == "deleted" && !st.present) || (o.outcome == "not_found" && st.present) {
			return st, false
		}
		return register{floor: max64(st.floor, st.tok)}, true
	case "append":
		if !o.known {
			if !st.present {
				return st, false
			}
			return st.written(st.value + i.value), true
		}
		if o.outcome == "not_stored" {
			return st, !st.present
		}
		return st.written(st.value + i.value), st.present
	case "incr", "decr":
		if !st.present {
			return st, o.known && o.outcome == "not_found"
		}
		n, stored, ok := arith(st.value, i.op == "incr", i.delta)
		if !o.known {
			return st.written(stored), ok
		}
		switch o.outcome {
		case "non_numeric":
			return st, !ok
		case "value":
			return st.written(stored), ok && o.value == strconv.FormatUint(n, 10)
		default: // not_found
			return st, false
		}
	case "cas":
		if !o.known || o.outcome == "stored" {
			if !st.present || !st.tokenMayBe(i.token) {
				return st, false
			}
			next := st.written(i.value)
			next.floor = max64(next.floor, i.token)
			return next, true
		}
		if o.outcome == "not_found" {
			return st, !st.present
		}
		// exists: the token is not the current value's.
		return st, st.present && (st.tok == 0 || st.tok != i.token)
	}
	return st, false
}

func step(state, in, out interface{}) []interface{} {
	st := state.(register)
	i := in.(input)
	o := out.(output)
	switch i.op {
	case "get", "gets":
		if o.found != st.present || (o.found && o.value != st.value) {
			return nil
		}
		if i.op == "gets" && o.found {
			if !st.tokenMayBe(o.token) {
				return nil
			}
			st.tok = o.token
		}
		return []interface{}{st}
	}
	var next []interface{}
	if after, ok := apply(st, i, o); ok {
		next = append(next, after)
	}
	if !o.known {
		// It may never apply: the write is linearized at the end of the
		// history, where nothing reads it, or changes nothing here.
		next = append(next, st)
	}
	return next
}

var model = (&porcupine.NondeterministicModel{
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
	Init:              func() []interface{} { return []interface{}{register{}} },
	Step:              step,
	DescribeOperation: describe,
	DescribeState: func(state interface{}) string {
		st := state.(register)
		if !st.present {
			return "absent"
		}
		if st.tok != 0 {
			return fmt.Sprintf("%q (cas %d)", st.value, st.tok)
		}
		return fmt.Sprintf("%q", st.value)
	},
}).ToModel()

func describe(in, out interface{}) string {
	i := in.(input)
	o := out.(output)
	var call string
	switch i.op {
	case "get", "gets", "delete":
		call = fmt.Sprintf("%s(%s)", i.op, i.key)
	case "incr", "decr":
		call = fmt.Sprintf("%s(%s, %d)", i.op, i.key, i.delta)
	case "cas":
		call = fmt.Sprintf("cas(%s, %q, %d)", i.key, i.value, i.token)
	default:
		call = fmt.Sprintf("%s(%s, %q)", i.op, i.key, i.value)
	}
	switch {
	case !o.known:
		return call
	case i.op == "get" || i.op == "gets":
		if !o.found {
			return call + " -> miss"
		}
		if i.op == "gets" {
			return fmt.Sprintf("%s -> %q (cas %d)", call, o.value, o.token)
		}
		return fmt.Sprintf("%s -> %q", call, o.value)
	case i.op == "incr" || i.op == "decr":
		if o.outcome == "value" {
			return call + " -> " + o.value
		}
		return call + " -> " + o.outcome
	case o.outcome != "":
		return call + " -> " + o.outcome
	}
	return call
}
