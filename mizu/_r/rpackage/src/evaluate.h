// Evaluating R code for a task so that whatever it does comes back as a
// value: its result, or a record of its error, with the warnings it raised.
//
// Each evaluation (eval_safely's, or a session's: below) runs under
// R_tryEvalSilent, whose top-level context stops every R error and
// interrupt, inside withCallingHandlers: its handlers
// record the condition and the calls at it, muffle warnings after
// recording them, and leave the call at the first error condition, as
// tryCatch would, whether stop(), signalCondition() or compiled code raised
// it.
//
// These functions allocate outside R_tryEvalSilent, so out of memory there
// is an R error like any other allocation's: a caller holding objects with
// destructors calls them inside r_call (unwind.h).
#pragma once

#include "r_api.h"

namespace mizu::r {

// Evaluates call in env. Returns, unprotected,
//   list(value =, error =, warnings =)
// where error is NULL, or list(message =, call =, classes =, traceback =)
// (call: the deparsed call of the condition, or NULL; classes: its class
// vector; traceback: one deparsed call per frame from `call` to the one
// that signalled, outermost first), and warnings is a list of
// list(message =, call =, classes =), the first 50 raised.
SEXP eval_safely(SEXP call, SEXP env);

// A session: the worker loop's many calls under one establishment of
// those handlers, which costs more than most calls. session_expression
// wraps `body` (the loop, a .Call) in the handlers; begin_session makes a
// record current for every call the loop makes through session_call;
// run_session evaluates the expression in env, returning true if it
// returned and false if an R error or interrupt ended it (then
// session_outcome(R_NilValue, true) describes that error); end_session
// follows every begin_session. run_session and end_session allocate
// nothing, so they cannot fail with an R error themselves.
//
// While the loop runs, session_call calls function `id` as call_function
// does and returns its value, unprotected; an error in it ends the
// session. session_outcome then gives the call's outcome, with the
// warnings it raised, as eval_safely does; session_quiet tells a call
// that raised none, whose outcome is its value alone.
SEXP session_expression(SEXP body);
void begin_session();
bool run_session(SEXP expression, SEXP env);
void end_session();
SEXP session_call(int id, SEXP args, SEXP kwargs);
SEXP session_outcome(SEXP value, bool failed);
bool session_quiet();

// What the condition handlers call back with; from R code only.
void record_error(SEXP condition, SEXP calls);
void record_warning(SEXP condition);

// The value of `name`, one of namespace `ns`'s own bindings, forced if
// lazy-loaded; an R error if it is unbound. (Before R 4.5, which has no
// R_getVar, the name is evaluated in `ns`: an unbound one would be looked
// up in its imports and beyond, which the package's own names never are.)
SEXP namespace_value(SEXP ns, const char* name);

// Parses `text`, R source of one expression that evaluates to a function
// ("function(x, p) quantile(x, p)") or the name of one ("mean",
// "stats::median"), evaluates it once in the global environment, and keeps
// the function. Returns as eval_safely does, the value being the
// function's id, an integer from 1.
SEXP register_function(SEXP text);

// Calls function `id` with the values of list `args` as positional
// arguments and those of the named list `kwargs` (or NULL) as named ones;
// returns as eval_safely does. Throws std::out_of_range for an unknown id.
SEXP call_function(int id, SEXP args, SEXP kwargs);

}  // namespace mizu::r
