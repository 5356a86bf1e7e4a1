// R reports errors and interrupts by longjmp, C++ by exceptions, and neither
// may cross the other's frames: a longjmp over a C++ frame skips its
// destructors, and an exception thrown through R's C frames leaves R's
// context stack pointing at frames that are gone.
//
// The rules this package keeps:
// - A function that calls R holds no object with a destructor, and neither
//   does any frame between it and the nearest r_call or entry point. A
//   longjmp may then pass over those frames (C++ allows it when it skips no
//   destructor), and R's PROTECT stack unwinds with it.
// - Where an object with a destructor must stay alive above R calls (a
//   wire::Writer, a table of block references), the R calls run inside
//   r_call, which turns R's jump into an RJump exception that unwinds the
//   C++ frames properly.
// - No C++ exception reaches R: r_call catches what its body throws and
//   rethrows it outside R's frames, and every .Call routine runs its body
//   through entry(), which turns an exception into an R error, or resumes
//   the jump an RJump carries, once every C++ frame below it is gone.
#pragma once

#include <csetjmp>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <type_traits>

#include "r_api.h"

namespace mizu::r {

// An R error or interrupt caught by r_call, on its way to the entry point
// that resumes it.
class RJump : public std::exception {
public:
    explicit RJump(SEXP token) noexcept : token_(token) {}
    SEXP token() const noexcept { return token_; }
    const char* what() const noexcept override { return "an R error unwinding through C++"; }

private:
    SEXP token_;
};

namespace detail {

// The continuation that R_UnwindProtect fills in when R jumps; one serves
// every r_call, since they never nest.
SEXP unwind_token();
// Whether an r_call is running: one inside another would overwrite the
// pending jump the outer one must resume.
bool& in_r_call();

[[noreturn]] void nested_r_call();

}  // namespace detail

// Runs body(), which calls R and returns a SEXP (unprotected, for the
// caller to protect), so that an R error or interrupt inside it becomes an
// RJump exception, and a C++ exception it throws comes out of r_call
// unchanged. body may not call r_call.
template <class Body>
SEXP r_call(Body&& body) {
    struct Call {
        std::remove_reference_t<Body>* body;
        std::exception_ptr failure;
    } call{&body, nullptr};
    if (detail::in_r_call()) detail::nested_r_call();
    SEXP token = detail::unwind_token();
    std::jmp_buf jump;
    if (setjmp(jump)) {
        detail::in_r_call() = false;
        throw RJump(token);
    }
    detail::in_r_call() = true;
    SEXP result = R_UnwindProtect(
        [](void* data) -> SEXP {
            auto* c = static_cast<Call*>(data);
            try {
                return (*c->body)();
            } catch (...) {
                c->failure = std::current_exception();
                return R_NilValue;
            }
        },
        &call,
        [](void* data, Rboolean jumping) {
            // Back into r_call's frame first: an exception may not be thrown
            // from R's.
            if (jumping) std::longjmp(*static_cast<std::jmp_buf*>(data), 1);
        },
        &jump, token);
    detail::in_r_call() = false;
    // R_UnwindProtect keeps the result alive in the token; let it go.
    SETCAR(token, R_NilValue);
    if (call.failure) std::rethrow_exception(call.failure);
    return result;
}

// Runs f() with n objects PROTECTed for it, then UNPROTECTs them, whether
// f returns or throws: r_call leaves R's protect stack to its body when a
// C++ exception, not an R jump, ends it.
template <class F>
void then_unprotect(int n, F&& f) {
    try {
        f();
    } catch (...) {
        UNPROTECT(n);
        throw;
    }
    UNPROTECT(n);
}

// The body of a .Call routine: its result, or an R error carrying the text
// of the C++ exception it threw, or the resumed R jump of an RJump.
template <class Body>
SEXP entry(Body&& body) noexcept {
    char message[8192];
    SEXP token = nullptr;
    try {
        return body();
    } catch (const RJump& jump) {
        token = jump.token();
    } catch (const std::exception& e) {
        std::snprintf(message, sizeof message, "%s", e.what());
    } catch (...) {
        std::snprintf(message, sizeof message, "an unexpected C++ exception");
    }
    if (token) R_ContinueUnwind(token);
    Rf_error("%s", message);
}

}  // namespace mizu::r
