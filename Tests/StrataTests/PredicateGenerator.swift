import Foundation
@testable import Strata

// Builds `Predicate` expression trees at run time, for QueryDifferentialTests. Every tree is made
// of the same `PredicateExpressions.build_*` calls the `#Predicate` macro emits, in the same
// shapes (checked against `-dump-macro-expansions`): for example `$0.inner.n > c` is a key path
// on a key path, `$0.oi == c` compares with a `Value<Int?>`, `$0.maybe?.n == c` is an
// `OptionalFlatMap`, `list.contains($0.i)` and `$0.tags.contains(x)` are `SequenceContains`, and
// `$0.s.contains(x)` is `CollectionContainsCollection`. Strata's translation pattern-matches on
// those concrete types, so the generated trees must be what users' predicates are.

typealias GenBoolExpression = any StandardPredicateExpression<Bool>

/// A generated predicate: how to build its expression for the closure's variable, and its text
/// (in `#Predicate` syntax, constants escaped) for failure messages.
struct GenPredicate<M> {
    let text: String
    let build: (PredicateExpressions.Variable<M>) -> GenBoolExpression
    /// Whether evaluating it can throw (a force unwrap of a possibly nil value).
    var mayThrow = false

    var predicate: Predicate<M> { Predicate<M> { build($0) } }
}

/// The comparison operators of `#Predicate`.
enum GenOp: CaseIterable {
    case eq, ne, lt, le, gt, ge

    var symbol: String {
        switch self {
        case .eq: "=="
        case .ne: "!="
        case .lt: "<"
        case .le: "<="
        case .gt: ">"
        case .ge: ">="
        }
    }

    var comparison: PredicateExpressions.ComparisonOperator? {
        switch self {
        case .lt: .lessThan
        case .le: .lessThanOrEqual
        case .gt: .greaterThan
        case .ge: .greaterThanOrEqual
        case .eq, .ne: nil
        }
    }
}

/// Text for a constant, with every non-ASCII or invisible scalar escaped so that "é" and
/// "e\u{301}" read differently in a failure message.
func genDescribe(_ value: Any) -> String {
    if let optional = value as? any OptionalValue {
        guard let wrapped = optional.wrappedAny else { return "nil" }
        return genDescribe(wrapped)
    }
    switch value {
    case let s as String:
        if s.count > 24 { return "\"\(genEscape(String(s.prefix(8))))…\"(\(s.count) chars)" }
        return "\"\(genEscape(s))\""
    case let d as Date: return "Date(\(d.timeIntervalSinceReferenceDate))"
    case let a as [Any]: return "[" + a.map(genDescribe).joined(separator: ", ") + "]"
    case let r as any RawRepresentable: return ".\(value)(\(genDescribe(r.rawValue)))"
    default: return "\(value)"
    }
}

func genEscape(_ s: String) -> String {
    var out = ""
    for scalar in s.unicodeScalars {
        if scalar.value >= 0x20 && scalar.value < 0x7F && scalar != "\\" && scalar != "\"" {
            out.unicodeScalars.append(scalar)
        } else {
            out += "\\u{\(String(scalar.value, radix: 16))}"
        }
    }
    return out
}

enum Gen {
    typealias Variable<M> = PredicateExpressions.Variable<M>

    // MARK: Combinators (existentials opened by generic helpers)

    static func and<M>(_ a: GenPredicate<M>, _ b: GenPredicate<M>) -> GenPredicate<M> {
        GenPredicate(
            text: "(\(a.text) && \(b.text))",
            build: { v in
                func open<A: StandardPredicateExpression<Bool>, B: StandardPredicateExpression<Bool>>(_ a: A, _ b: B) -> GenBoolExpression {
                    PredicateExpressions.build_Conjunction(lhs: a, rhs: b)
                }
                return open(a.build(v), b.build(v))
            }, mayThrow: a.mayThrow || b.mayThrow)
    }

    static func or<M>(_ a: GenPredicate<M>, _ b: GenPredicate<M>) -> GenPredicate<M> {
        GenPredicate(
            text: "(\(a.text) || \(b.text))",
            build: { v in
                func open<A: StandardPredicateExpression<Bool>, B: StandardPredicateExpression<Bool>>(_ a: A, _ b: B) -> GenBoolExpression {
                    PredicateExpressions.build_Disjunction(lhs: a, rhs: b)
                }
                return open(a.build(v), b.build(v))
            }, mayThrow: a.mayThrow || b.mayThrow)
    }

    static func not<M>(_ a: GenPredicate<M>) -> GenPredicate<M> {
        GenPredicate(
            text: a.text.hasPrefix("(") ? "!\(a.text)" : "!(\(a.text))",
            build: { v in
                func open<A: StandardPredicateExpression<Bool>>(_ a: A) -> GenBoolExpression {
                    PredicateExpressions.build_Negation(a)
                }
                return open(a.build(v))
            }, mayThrow: a.mayThrow)
    }

    // MARK: Operands

    static func field<M, V>(_ v: Variable<M>, _ keyPath: KeyPath<M, V> & Sendable) -> PredicateExpressions.KeyPath<Variable<M>, V> {
        PredicateExpressions.build_KeyPath(root: v, keyPath: keyPath)
    }

    /// `$0.outer.inner`, as the macro writes it: a key path expression on a key path expression.
    static func nested<M, O, V>(_ v: Variable<M>, _ outer: KeyPath<M, O> & Sendable, _ inner: KeyPath<O, V> & Sendable)
        -> PredicateExpressions.KeyPath<PredicateExpressions.KeyPath<Variable<M>, O>, V>
    {
        PredicateExpressions.build_KeyPath(root: PredicateExpressions.build_KeyPath(root: v, keyPath: outer), keyPath: inner)
    }

    /// Applies `op` to two operand expressions of the same comparable type.
    static func compare<L: StandardPredicateExpression, R: StandardPredicateExpression>(_ lhs: L, _ rhs: R, _ op: GenOp) -> GenBoolExpression
    where L.Output == R.Output, L.Output: Comparable {
        switch op {
        case .eq: PredicateExpressions.build_Equal(lhs: lhs, rhs: rhs)
        case .ne: PredicateExpressions.build_NotEqual(lhs: lhs, rhs: rhs)
        default: PredicateExpressions.build_Comparison(lhs: lhs, rhs: rhs, op: op.comparison!)
        }
    }

    static func equate<L: StandardPredicateExpression, R: StandardPredicateExpression>(_ lhs: L, _ rhs: R, negated: Bool) -> GenBoolExpression
    where L.Output == R.Output, L.Output: Equatable {
        negated ? PredicateExpressions.build_NotEqual(lhs: lhs, rhs: rhs) : PredicateExpressions.build_Equal(lhs: lhs, rhs: rhs)
    }

    // MARK: Leaves

    /// `$0.<name> op c`, or `c op $0.<name>` when `constantFirst`.
    static func compare<M, V: Comparable & Codable & Sendable>(
        _ name: String, _ keyPath: KeyPath<M, V> & Sendable, _ op: GenOp, _ c: V,
        constantFirst: Bool
    ) -> GenPredicate<M> {
        let text = constantFirst ? "\(genDescribe(c)) \(op.symbol) $0.\(name)" : "$0.\(name) \(op.symbol) \(genDescribe(c))"
        return GenPredicate(
            text: text,
            build: { v in
                constantFirst
                    ? compare(PredicateExpressions.build_Arg(c), field(v, keyPath), op)
                    : compare(field(v, keyPath), PredicateExpressions.build_Arg(c), op)
            })
    }

    /// `$0.<name> == c` / `!=` for a merely equatable value (enums, Bool, optionals: `$0.oi == c`
    /// with `c: Int?` compares with a `Value<Int?>`, as the macro does for `c: Int`).
    static func equal<M, V: Equatable & Codable & Sendable>(
        _ name: String, _ keyPath: KeyPath<M, V> & Sendable, _ c: V,
        negated: Bool, constantFirst: Bool
    ) -> GenPredicate<M> {
        let op = negated ? "!=" : "=="
        let text = constantFirst ? "\(genDescribe(c)) \(op) $0.\(name)" : "$0.\(name) \(op) \(genDescribe(c))"
        return GenPredicate(
            text: text,
            build: { v in
                constantFirst
                    ? equate(PredicateExpressions.build_Arg(c), field(v, keyPath), negated: negated)
                    : equate(field(v, keyPath), PredicateExpressions.build_Arg(c), negated: negated)
            })
    }

    /// `$0.<name> == nil` / `!= nil` (a `NilLiteral`), or `nil == $0.<name>`.
    static func isNil<M, W: Equatable>(_ name: String, _ keyPath: KeyPath<M, W?> & Sendable, negated: Bool, nilFirst: Bool) -> GenPredicate<M> {
        let op = negated ? "!=" : "=="
        return GenPredicate(
            text: nilFirst ? "nil \(op) $0.\(name)" : "$0.\(name) \(op) nil",
            build: { v in
                let literal: PredicateExpressions.NilLiteral<W> = PredicateExpressions.build_NilLiteral()
                return nilFirst ? equate(literal, field(v, keyPath), negated: negated) : equate(field(v, keyPath), literal, negated: negated)
            })
    }

    /// `$0.<outer>.<inner> op c`.
    static func nestedCompare<M, O, V: Comparable & Codable & Sendable>(
        _ name: String, _ outer: KeyPath<M, O> & Sendable, _ inner: KeyPath<O, V> & Sendable,
        _ op: GenOp, _ c: V
    ) -> GenPredicate<M> {
        GenPredicate(
            text: "$0.\(name) \(op.symbol) \(genDescribe(c))",
            build: { v in
                compare(nested(v, outer, inner), PredicateExpressions.build_Arg(c), op)
            })
    }

    /// `$0.<outer>?.<inner> == c` (`c` optional, possibly nil), an `OptionalFlatMap`.
    static func flatMapEqual<M, O, V: Equatable & Codable & Sendable>(
        _ name: String, _ outer: KeyPath<M, O?> & Sendable, _ inner: KeyPath<O, V> & Sendable,
        _ c: V?, negated: Bool
    ) -> GenPredicate<M> {
        GenPredicate(
            text: "$0.\(name) \(negated ? "!=" : "==") \(genDescribe(c as Any))",
            build: { v in
                let mapped = PredicateExpressions.build_flatMap(field(v, outer)) { (o: Variable<O>) in
                    PredicateExpressions.build_KeyPath(root: o, keyPath: inner)
                }
                return equate(mapped, PredicateExpressions.build_Arg(c), negated: negated)
            })
    }

    /// `$0.<outer>?.<inner>.contains(x) == true`, an `OptionalFlatMap` around a string search.
    static func flatMapContains<M, O>(
        _ name: String, _ outer: KeyPath<M, O?> & Sendable, _ inner: KeyPath<O, String> & Sendable,
        _ x: String
    ) -> GenPredicate<M> {
        GenPredicate(
            text: "$0.\(name).contains(\(genDescribe(x))) == true",
            build: { v in
                let mapped = PredicateExpressions.build_flatMap(field(v, outer)) { (o: Variable<O>) in
                    PredicateExpressions.build_contains(PredicateExpressions.build_KeyPath(root: o, keyPath: inner), PredicateExpressions.build_Arg(x))
                }
                return PredicateExpressions.build_Equal(lhs: mapped, rhs: PredicateExpressions.build_Arg(Optional(true)))
            })
    }

    /// `list.contains($0.<name>)`.
    static func inList<M, V: Equatable & Codable & Sendable>(_ name: String, _ keyPath: KeyPath<M, V> & Sendable, _ list: [V]) -> GenPredicate<M> {
        GenPredicate(
            text: "\(genDescribe(list)).contains($0.\(name))",
            build: { v in
                PredicateExpressions.build_contains(PredicateExpressions.build_Arg(list), field(v, keyPath))
            })
    }

    /// `$0.<name>.contains(x)` on an array field.
    static func arrayContains<M, V: Equatable & Codable & Sendable>(_ name: String, _ keyPath: KeyPath<M, [V]> & Sendable, _ x: V) -> GenPredicate<M> {
        GenPredicate(
            text: "$0.\(name).contains(\(genDescribe(x)))",
            build: { v in
                PredicateExpressions.build_contains(field(v, keyPath), PredicateExpressions.build_Arg(x))
            })
    }

    /// `$0.<name>.contains(x)` on a string: `CollectionContainsCollection`.
    static func stringContains<M>(_ name: String, _ keyPath: KeyPath<M, String> & Sendable, _ x: String) -> GenPredicate<M> {
        GenPredicate(
            text: "$0.\(name).contains(\(genDescribe(x)))",
            build: { v in
                PredicateExpressions.build_contains(field(v, keyPath), PredicateExpressions.build_Arg(x))
            })
    }

    /// `$0.<outer>.<inner>.contains(x)`.
    static func nestedStringContains<M, O>(_ name: String, _ outer: KeyPath<M, O> & Sendable, _ inner: KeyPath<O, String> & Sendable, _ x: String)
        -> GenPredicate<M>
    {
        GenPredicate(
            text: "$0.\(name).contains(\(genDescribe(x)))",
            build: { v in
                PredicateExpressions.build_contains(nested(v, outer, inner), PredicateExpressions.build_Arg(x))
            })
    }

    /// `$0.<name>.starts(with: x)`.
    static func startsWith<M>(_ name: String, _ keyPath: KeyPath<M, String> & Sendable, _ x: String) -> GenPredicate<M> {
        GenPredicate(
            text: "$0.\(name).starts(with: \(genDescribe(x)))",
            build: { v in
                PredicateExpressions.build_starts(field(v, keyPath), with: PredicateExpressions.build_Arg(x))
            })
    }

    /// `$0.<outer>.<inner>.starts(with: x)`.
    static func nestedStartsWith<M, O>(_ name: String, _ outer: KeyPath<M, O> & Sendable, _ inner: KeyPath<O, String> & Sendable, _ x: String) -> GenPredicate<
        M
    > {
        GenPredicate(
            text: "$0.\(name).starts(with: \(genDescribe(x)))",
            build: { v in
                PredicateExpressions.build_starts(nested(v, outer, inner), with: PredicateExpressions.build_Arg(x))
            })
    }

    /// `$0.<name>`: a Bool field as the whole condition.
    static func boolField<M>(_ name: String, _ keyPath: KeyPath<M, Bool> & Sendable) -> GenPredicate<M> {
        GenPredicate(text: "$0.\(name)", build: { v in field(v, keyPath) })
    }

    /// `$0.<a> op $0.<b>`: two fields of the object.
    static func fields<M, V: Comparable & Codable & Sendable>(
        _ a: String, _ ka: KeyPath<M, V> & Sendable, _ op: GenOp,
        _ b: String, _ kb: KeyPath<M, V> & Sendable
    ) -> GenPredicate<M> {
        GenPredicate(text: "$0.\(a) \(op.symbol) $0.\(b)", build: { v in compare(field(v, ka), field(v, kb), op) })
    }

    /// `($0.<name> ?? fallback) op c`.
    static func coalesce<M, V: Comparable & Codable & Sendable>(
        _ name: String, _ keyPath: KeyPath<M, V?> & Sendable, _ fallback: V,
        _ op: GenOp, _ c: V
    ) -> GenPredicate<M> {
        GenPredicate(
            text: "($0.\(name) ?? \(genDescribe(fallback))) \(op.symbol) \(genDescribe(c))",
            build: { v in
                compare(
                    PredicateExpressions.build_NilCoalesce(lhs: field(v, keyPath), rhs: PredicateExpressions.build_Arg(fallback)),
                    PredicateExpressions.build_Arg(c), op)
            })
    }

    /// `$0.<name>! op c`: throws on nil. With `guarded`, `$0.<name> != nil && $0.<name>! op c`, which cannot.
    static func forceUnwrap<M, V: Comparable & Codable & Sendable>(
        _ name: String, _ keyPath: KeyPath<M, V?> & Sendable, _ op: GenOp, _ c: V,
        guarded: Bool
    ) -> GenPredicate<M> {
        let unwrapped = GenPredicate<M>(
            text: "$0.\(name)! \(op.symbol) \(genDescribe(c))",
            build: { v in
                compare(PredicateExpressions.build_ForcedUnwrap(field(v, keyPath)), PredicateExpressions.build_Arg(c), op)
            }, mayThrow: true)
        guard guarded else { return unwrapped }
        let guardNil: GenPredicate<M> = GenPredicate(
            text: "$0.\(name) != nil",
            build: { v in
                let literal: PredicateExpressions.NilLiteral<V> = PredicateExpressions.build_NilLiteral()
                return equate(field(v, keyPath), literal, negated: true)
            })
        var combined = and(guardNil, unwrapped)
        combined.mayThrow = false
        return combined
    }
}
