#ifndef LIB_VERSION_H_
#define LIB_VERSION_H_

namespace aggregator {

// The release of aggregatord and its tools.
inline constexpr char kVersion[] = "0.1.0";

}  // namespace aggregator

#endif  // LIB_VERSION_H_
