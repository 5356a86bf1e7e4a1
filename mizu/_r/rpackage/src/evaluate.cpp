#include "evaluate.h"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace mizu::r {

namespace {

constexpr R_xlen_t kMaxWarnings = 50;

// The R objects this file keeps for the life of the process, in one
// preserved list.
enum Kept : R_xlen_t {
    kWithCallingHandlers,
    kOnError,        // the package's handlers and R helpers, and its namespace
    kOnWarning,
    kFormatError,
    kFormatWarnings,
    kNamespace,
    kResultNames,    // c("value", "error", "warnings")
    kRecordNames,    // c("message", "call", "classes", "traceback")
    kRecords,        // a pairlist, one Record list per evaluation in progress, innermost first
    kRegistry,       // list of list(head =, env =) by function id - 1
    kKeptCount,
};

// What the handlers record during one evaluation.
enum Record : R_xlen_t { kCondition, kCalls, kWarnings, kWarningCount, kRecordCount };

SEXP kept = nullptr;
R_xlen_t registered = 0;

// A names vector every result shares: not mutable, so R copies it before
// any change user code makes to one result's names.
SEXP shared_names(std::initializer_list<const char*> names) {
    SEXP out = PROTECT(Rf_allocVector(STRSXP, R_xlen_t(names.size())));
    R_xlen_t k = 0;
    for (const char* name : names) SET_STRING_ELT(out, k++, Rf_mkChar(name));
    MARK_NOT_MUTABLE(out);
    UNPROTECT(1);
    return out;
}

// A function of the package namespace.
SEXP package_function(SEXP ns, const char* name) {
    SEXP value = namespace_value(ns, name);
    if (!Rf_isFunction(value)) Rf_error("the mizu package has no function %s", name);
    return value;
}

SEXP kept_objects() {
    if (kept) return kept;
    SEXP list = PROTECT(Rf_allocVector(VECSXP, kKeptCount));
    SEXP ns = PROTECT(R_FindNamespace(PROTECT(Rf_mkString("mizu"))));
    SET_VECTOR_ELT(list, kWithCallingHandlers, Rf_findFun(Rf_install("withCallingHandlers"), R_BaseNamespace));
    SET_VECTOR_ELT(list, kOnError, package_function(ns, "on_error"));
    SET_VECTOR_ELT(list, kOnWarning, package_function(ns, "on_warning"));
    SET_VECTOR_ELT(list, kFormatError, package_function(ns, "format_error"));
    SET_VECTOR_ELT(list, kFormatWarnings, package_function(ns, "format_warnings"));
    SET_VECTOR_ELT(list, kNamespace, ns);
    SET_VECTOR_ELT(list, kResultNames, shared_names({"value", "error", "warnings"}));
    SET_VECTOR_ELT(list, kRecordNames, shared_names({"message", "call", "classes", "traceback"}));
    SET_VECTOR_ELT(list, kRegistry, Rf_allocVector(VECSXP, 16));
    R_PreserveObject(list);
    kept = list;
    UNPROTECT(3);
    return kept;
}

SEXP current_record() {
    SEXP records = VECTOR_ELT(kept_objects(), kRecords);
    if (records == R_NilValue) Rf_error("a mizu condition handler ran outside eval_safely");
    return CAR(records);
}

// The calls of the frames the task ran, from the sys.calls() its error
// handler saw: after the innermost withCallingHandlers frame of
// eval_safely, and before the handler's own frame (and the
// .handleSimpleError frame through which R calls it for errors raised
// in C).
SEXP task_frames(SEXP calls, SEXP wrapper_function) {
    static SEXP handle_simple_error = Rf_install(".handleSimpleError");
    R_xlen_t n = Rf_xlength(calls), start = 0, end = n > 0 ? n - 1 : 0, i = 0;
    for (SEXP node = calls; node != R_NilValue; node = CDR(node), ++i)
        if (i < end && CAR(CAR(node)) == wrapper_function) start = i + 1;
    SEXP before_handler = end > 0 ? Rf_nthcdr(calls, int(end - 1)) : R_NilValue;
    if (end > start && CAR(CAR(before_handler)) == handle_simple_error) --end;
    SEXP out = PROTECT(Rf_allocVector(VECSXP, end - start));
    i = 0;
    for (SEXP node = calls; node != R_NilValue; node = CDR(node), ++i)
        if (i >= start && i < end) SET_VECTOR_ELT(out, i - start, CAR(node));
    UNPROTECT(1);
    return out;
}

// An error record made here, for the rare errors the R helpers cannot
// describe.
SEXP plain_record(SEXP k, const char* message, SEXP classes) {
    SEXP record = PROTECT(Rf_allocVector(VECSXP, 4));
    Rf_setAttrib(record, R_NamesSymbol, VECTOR_ELT(k, kRecordNames));
    SET_VECTOR_ELT(record, 0, Rf_mkString(message));
    SET_VECTOR_ELT(record, 2, classes == R_NilValue ? Rf_allocVector(STRSXP, 0) : classes);
    SET_VECTOR_ELT(record, 3, Rf_allocVector(STRSXP, 0));
    UNPROTECT(1);
    return record;
}

// f(a, b) evaluated in the global environment; NULL if it fails.
SEXP call_quietly(SEXP f, SEXP a, SEXP b) {
    SEXP call = PROTECT(b ? Rf_lang3(f, a, b) : Rf_lang2(f, a));
    int failed = 0;
    SEXP value = R_tryEvalSilent(call, R_GlobalEnv, &failed);
    UNPROTECT(1);
    return failed ? R_NilValue : value;
}

SEXP error_record(SEXP k, SEXP record) {
    SEXP condition = VECTOR_ELT(record, kCondition);
    if (condition == R_NilValue)
        return plain_record(k,
                            "the R call ended without a value and without an error condition: it invoked the "
                            "\"abort\" restart, or an error struck inside a condition handler",
                            R_NilValue);
    SEXP calls = PROTECT(task_frames(VECTOR_ELT(record, kCalls), VECTOR_ELT(k, kWithCallingHandlers)));
    SEXP formatted = PROTECT(call_quietly(VECTOR_ELT(k, kFormatError), condition, calls));
    if (formatted == R_NilValue)
        formatted = plain_record(k, "an R error whose message could not be formatted",
                                 Rf_getAttrib(condition, R_ClassSymbol));
    UNPROTECT(2);
    return formatted;
}

SEXP warning_records(SEXP k, SEXP record) {
    R_xlen_t seen = INTEGER(VECTOR_ELT(record, kWarningCount))[0];
    if (seen == 0) return Rf_allocVector(VECSXP, 0);
    SEXP conditions = PROTECT(Rf_xlengthgets(VECTOR_ELT(record, kWarnings), std::min(seen, kMaxWarnings)));
    SEXP formatted = call_quietly(VECTOR_ELT(k, kFormatWarnings), conditions, nullptr);
    UNPROTECT(1);
    return formatted == R_NilValue ? Rf_allocVector(VECSXP, 0) : formatted;
}

// A record for one evaluation or session, made current: the handlers
// write into it.
SEXP push_record(SEXP k) {
    SEXP record = PROTECT(Rf_allocVector(VECSXP, kRecordCount));
    SET_VECTOR_ELT(record, kWarningCount, Rf_ScalarInteger(0));
    SET_VECTOR_ELT(k, kRecords, Rf_cons(record, VECTOR_ELT(k, kRecords)));
    UNPROTECT(1);
    return record;
}

void pop_record(SEXP k) { SET_VECTOR_ELT(k, kRecords, CDR(VECTOR_ELT(k, kRecords))); }

// call inside withCallingHandlers with the package's handlers.
SEXP with_handlers(SEXP k, SEXP call) {
    static SEXP error = Rf_install("error"), warning = Rf_install("warning"), interrupt = Rf_install("interrupt");
    SEXP on_error = VECTOR_ELT(k, kOnError);
    SEXP wrapped = Rf_lang5(VECTOR_ELT(k, kWithCallingHandlers), call, on_error, VECTOR_ELT(k, kOnWarning), on_error);
    SEXP handlers = CDDR(wrapped);
    SET_TAG(handlers, error);
    SET_TAG(CDR(handlers), warning);
    SET_TAG(CDDR(handlers), interrupt);
    return wrapped;
}

// list(value =, error =, warnings =) from a record.
SEXP outcome_from(SEXP k, SEXP record, SEXP value, bool failed) {
    PROTECT(value);
    SEXP result = PROTECT(Rf_allocVector(VECSXP, 3));
    Rf_setAttrib(result, R_NamesSymbol, VECTOR_ELT(k, kResultNames));
    if (failed)
        SET_VECTOR_ELT(result, 1, error_record(k, record));
    else
        SET_VECTOR_ELT(result, 0, value);
    SET_VECTOR_ELT(result, 2, warning_records(k, record));
    UNPROTECT(2);
    return result;
}

// The call of registered function id with these arguments, and the
// environment it runs in.
SEXP registered_call(int id, SEXP args, SEXP kwargs, SEXP* env) {
    if (id < 1 || id > registered)
        throw std::out_of_range("no R function has id " + std::to_string(id) + "; " + std::to_string(registered) +
                                " are registered");
    PROTECT(args);
    SEXP entry = VECTOR_ELT(VECTOR_ELT(kept_objects(), kRegistry), id - 1);
    R_xlen_t npositional = Rf_xlength(args), nnamed = Rf_xlength(kwargs);
    SEXP names = Rf_getAttrib(kwargs, R_NamesSymbol);
    if (nnamed > 0 && TYPEOF(names) != STRSXP) Rf_error("named arguments must come in a list with names");
    SEXP call = PROTECT(Rf_lcons(VECTOR_ELT(entry, 0), Rf_allocList(int(npositional + nnamed))));
    SEXP node = CDR(call);
    for (R_xlen_t k = 0; k < npositional; ++k, node = CDR(node)) SETCAR(node, VECTOR_ELT(args, k));
    for (R_xlen_t k = 0; k < nnamed; ++k, node = CDR(node)) {
        SETCAR(node, VECTOR_ELT(kwargs, k));
        SET_TAG(node, Rf_install(Rf_translateChar(STRING_ELT(names, k))));
    }
    *env = VECTOR_ELT(entry, 1);
    UNPROTECT(2);
    return call;
}

}  // namespace

SEXP eval_safely(SEXP call, SEXP env) {
    SEXP k = kept_objects();
    SEXP record = PROTECT(push_record(k));
    SEXP wrapped = PROTECT(with_handlers(k, call));
    int failed = 0;
    SEXP value = R_tryEvalSilent(wrapped, env, &failed);
    SEXP result = outcome_from(k, record, value, failed != 0);
    pop_record(k);
    UNPROTECT(2);
    return result;
}

SEXP session_expression(SEXP body) { return with_handlers(kept_objects(), body); }

void begin_session() { push_record(kept_objects()); }

bool run_session(SEXP expression, SEXP env) {
    int failed = 0;
    R_tryEvalSilent(expression, env, &failed);
    return failed == 0;
}

void end_session() { pop_record(kept_objects()); }

namespace {

// A record as a new call finds it. What a call left there would keep its
// arguments alive (a condition's call holds them) until another call's
// conditions replaced it.
// Most calls leave it as they found it, and write nothing here.
void clear_record(SEXP record) {
    for (Record r : {kCondition, kCalls, kWarnings})
        if (VECTOR_ELT(record, r) != R_NilValue) SET_VECTOR_ELT(record, r, R_NilValue);
    INTEGER(VECTOR_ELT(record, kWarningCount))[0] = 0;
}

}  // namespace

SEXP session_call(int id, SEXP args, SEXP kwargs) {
    clear_record(current_record());
    SEXP env;
    SEXP call = PROTECT(registered_call(id, args, kwargs, &env));
    SEXP value = Rf_eval(call, env);
    UNPROTECT(1);
    return value;
}

SEXP session_outcome(SEXP value, bool failed) {
    SEXP record = current_record();
    SEXP outcome = outcome_from(kept_objects(), record, value, failed);
    clear_record(record);
    return outcome;
}

bool session_quiet() {
    SEXP record = current_record();
    if (INTEGER(VECTOR_ELT(record, kWarningCount))[0] != 0) return false;
    // An error the call caught itself left its condition, which holds the
    // call's arguments: not kept while the worker idles.
    clear_record(record);
    return true;
}

void record_error(SEXP condition, SEXP calls) {
    SEXP record = current_record();
    SET_VECTOR_ELT(record, kCondition, condition);
    SET_VECTOR_ELT(record, kCalls, calls);
}

void record_warning(SEXP condition) {
    SEXP record = current_record();
    int& seen = INTEGER(VECTOR_ELT(record, kWarningCount))[0];
    if (seen < kMaxWarnings) {
        if (VECTOR_ELT(record, kWarnings) == R_NilValue)
            SET_VECTOR_ELT(record, kWarnings, Rf_allocVector(VECSXP, kMaxWarnings));
        SET_VECTOR_ELT(VECTOR_ELT(record, kWarnings), seen, condition);
    }
    ++seen;
}

SEXP namespace_value(SEXP ns, const char* name) {
#if R_VERSION >= R_Version(4, 5, 0)
    return R_getVar(Rf_install(name), ns, FALSE);
#else
    // Before R 4.5 the API has no R_getVar. The names asked for are the
    // namespace's own, so evaluating one finds it there, and forces it.
    return Rf_eval(Rf_install(name), ns);
#endif
}

SEXP register_function(SEXP text) {
    SEXP k = kept_objects();
    static SEXP resolve_function = Rf_install("resolve_function");
    SEXP call = PROTECT(Rf_lang2(resolve_function, text));
    SEXP outcome = PROTECT(eval_safely(call, VECTOR_ELT(k, kNamespace)));
    SEXP resolved = VECTOR_ELT(outcome, 0);
    if (VECTOR_ELT(outcome, 1) == R_NilValue) {
        SEXP registry = VECTOR_ELT(k, kRegistry);
        if (registered == XLENGTH(registry)) {
            registry = Rf_xlengthgets(registry, 2 * registered);
            SET_VECTOR_ELT(k, kRegistry, registry);
        }
        SET_VECTOR_ELT(registry, registered++, resolved);
        SET_VECTOR_ELT(outcome, 0, Rf_ScalarInteger(int(registered)));
    }
    UNPROTECT(2);
    return outcome;
}

SEXP call_function(int id, SEXP args, SEXP kwargs) {
    SEXP env;
    SEXP call = PROTECT(registered_call(id, args, kwargs, &env));
    SEXP result = eval_safely(call, env);
    UNPROTECT(1);
    return result;
}

}  // namespace mizu::r
