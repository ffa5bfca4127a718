/*
 * WEFT_DELTA, read by servers and consumers alike: whether versions may
 * travel as deltas (docs/protocol.md, "Delta versions on the wire").
 * Internal.
 */
#ifndef WEFT_TRANSPORT_CORE_DELTA_MODE_H
#define WEFT_TRANSPORT_CORE_DELTA_MODE_H

typedef enum weft_delta_mode {
    WEFT_DELTA_AUTO,  /* a delta where the consumer holds its base and it is smaller */
    WEFT_DELTA_OFF,   /* every version whole */
    WEFT_DELTA_FORCE  /* a delta wherever the consumer holds its base (tests) */
} weft_delta_mode_t;

/* The mode in force; a value that does not parse is logged (once per
 * call) and taken as off. */
weft_delta_mode_t weft_delta_mode(void);

/* "auto", "off", "force". */
const char *weft_delta_mode_name(weft_delta_mode_t mode);

#endif
