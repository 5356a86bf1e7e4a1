#include "unwind.h"

namespace mizu::r::detail {

SEXP unwind_token() {
    static SEXP token = [] {
        SEXP t = R_MakeUnwindCont();
        R_PreserveObject(t);
        return t;
    }();
    return token;
}

bool& in_r_call() {
    static bool running = false;
    return running;
}

void nested_r_call() { throw std::logic_error("r_call was called inside another r_call"); }

}  // namespace mizu::r::detail
