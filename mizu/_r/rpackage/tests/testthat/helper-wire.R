# Wire values written by hand, to check the decoder against the format
# (doc/dev/wire.rst) rather than against the encoder.
u32 <- function(n) as.raw((n %/% 256^(0:3)) %% 256)
u64 <- function(n) c(u32(n %% 2^32), u32(n %/% 2^32))
wire <- function(...) c(as.raw(c(0x57, 0x01)), ...)
tag <- function(letter) charToRaw(letter)
inline_array <- function(typestr, shape, strides, data) {
    c(tag("a"), as.raw(nchar(typestr)), charToRaw(typestr), u32(as.integer(substring(typestr, 3))),
      as.raw(length(shape)), unlist(lapply(shape, u64)), unlist(lapply(strides, u64)),
      as.raw(0), u64(length(data)), data)
}
round_trip <- function(value, ...) {
    encoded <- encode(value, ...)
    decode(encoded$message, encoded$records, encoded$fds)
}
