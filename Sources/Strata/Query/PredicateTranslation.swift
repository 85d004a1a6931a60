import Foundation
import Synchronization

// Reads Foundation `#Predicate` expression trees into conditions the planner can put on an index.
// Each supported expression type conforms to a small protocol; anything else is `.unknown`, and
// the query still answers correctly by evaluating the predicate on decoded objects.
//
// A condition means exactly what the expression it came from means: `RecordFilter` evaluates it on
// encoded records instead of the predicate, and an exact plan skips the predicate altogether. So a
// force unwrap (`$0.rank!`) translates only where the predicate has already made sure the field
// is not nil (`$0.rank != nil && $0.rank! > 3`): anywhere else evaluating it throws for a nil
// value, and only evaluating the predicate on every object says so.

/// What the parts of a predicate already evaluated guarantee about the part being read: the
/// fields that are certainly not nil there.
struct TranslationScope {
    var nonNil: Set<String> = []
    /// Inside a closure (an optional's `flatMap`): its variable, the only one that reads as the
    /// root there. Nil at the top, where the predicate's own variable is the only one.
    var variable: PredicateExpressions.VariableID?

    func adding(_ paths: Set<String>) -> TranslationScope { TranslationScope(nonNil: nonNil.union(paths), variable: variable) }
}

enum CompareOp: String, Sendable {
    case eq = "==", ne = "!=", lt = "<", le = "<=", gt = ">", ge = ">="

    var flipped: CompareOp {
        switch self {
        case .lt: return .gt
        case .le: return .ge
        case .gt: return .lt
        case .ge: return .le
        default: return self
        }
    }
}

indirect enum Condition: CustomStringConvertible {
    case compare(path: String, op: CompareOp, value: Any)
    case isNil(path: String, Bool)
    case inList(path: String, values: [Any])
    case startsWith(path: String, prefix: String)
    case contains(path: String, substring: String)
    case arrayContains(path: String, value: Any)
    /// A full-text search of a string field (`search(_:_:)`).
    case textSearch(path: String, search: ParsedSearch)
    case and(Condition, Condition)
    case or(Condition, Condition)
    case not(Condition)
    /// An expression the planner does not read, whose evaluation may throw (a force unwrap the
    /// scope does not vouch for, a force cast, a subscript...): `Predicate.evaluate` decides.
    case unknown
    /// An expression the planner does not read and that cannot throw.
    case opaque

    /// Whether evaluating this condition may throw. Evaluation goes left to right and stops at the
    /// first false conjunct, so an index may only narrow the candidates by conjuncts before any
    /// that may throw: an object it skips must be one whose evaluation could not have thrown.
    var mayThrow: Bool {
        switch self {
        case .unknown: return true
        case let .and(a, b), let .or(a, b): return a.mayThrow || b.mayThrow
        case let .not(c): return c.mayThrow
        default: return false
        }
    }

    /// The fields certainly not nil wherever this condition is `holds` (for the right side of a
    /// `&&`, true; of a `||`, false).
    /// The conditions this one is the conjunction of (itself, unless it is an `&&`).
    var conjuncts: [Condition] {
        if case let .and(a, b) = self { return a.conjuncts + b.conjuncts }
        return [self]
    }

    func nonNilPaths(when holds: Bool) -> Set<String> {
        switch self {
        case let .isNil(path, isNil): return isNil != holds ? [path] : []
        case let .compare(path, op, value):
            // Equal to a value that is not nil: not nil.
            let present = !((value as? any OptionalValue).map { $0.wrappedAny == nil } ?? false)
            if holds && op == .eq && present { return [path] }
            if !holds && op == .ne && present { return [path] }
            return []
        case let .and(a, b):
            return holds
                ? a.nonNilPaths(when: true).union(b.nonNilPaths(when: true))
                : a.nonNilPaths(when: false).intersection(b.nonNilPaths(when: false))
        case let .or(a, b):
            return holds
                ? a.nonNilPaths(when: true).intersection(b.nonNilPaths(when: true))
                : a.nonNilPaths(when: false).union(b.nonNilPaths(when: false))
        case let .not(c): return c.nonNilPaths(when: !holds)
        default: return []
        }
    }

    var description: String {
        switch self {
        case let .compare(path, op, value): return "\(path) \(op.rawValue) \(show(value))"
        case let .isNil(path, isNil): return "\(path) \(isNil ? "==" : "!=") nil"
        case let .inList(path, values): return "\(path) in [\(values.map(show).joined(separator: ", "))]"
        case let .startsWith(path, prefix): return "\(path) starts with \"\(prefix)\""
        case let .contains(path, substring): return "\(path) contains \"\(substring)\""
        case let .arrayContains(path, value): return "\(path) contains element \(show(value))"
        case let .textSearch(path, search): return "\(path) matches \(search)"
        case let .and(a, b): return "(\(a) && \(b))"
        case let .or(a, b): return "(\(a) || \(b))"
        case let .not(c): return "!(\(c))"
        case .unknown, .opaque: return "<expression>"
        }
    }
}

extension Condition {
    /// Whether two conditions say the same (as their descriptions would, without formatting
    /// them whole: the planner compares the conditions of two ways to one index on every query).
    func isSame(as other: Condition) -> Bool {
        switch (self, other) {
        case let (.compare(p, o, v), .compare(q, r, w)): return p == q && o == r && showsSame(v, w)
        case let (.isNil(p, a), .isNil(q, b)): return p == q && a == b
        case let (.inList(p, a), .inList(q, b)):
            return p == q && a.count == b.count && zip(a, b).allSatisfy { showsSame($0, $1) }
        case let (.startsWith(p, a), .startsWith(q, b)), let (.contains(p, a), .contains(q, b)): return p == q && a == b
        case let (.arrayContains(p, v), .arrayContains(q, w)): return p == q && showsSame(v, w)
        case let (.textSearch(p, a), .textSearch(q, b)): return p == q && a == b
        case let (.and(a, b), .and(c, d)), let (.or(a, b), .or(c, d)): return a.isSame(as: c) && b.isSame(as: d)
        case let (.not(a), .not(b)): return a.isSame(as: b)
        case (.unknown, .unknown), (.opaque, .opaque), (.unknown, .opaque), (.opaque, .unknown): return true
        default: return false
        }
    }
}

/// Whether two constants show the same (`show`): two of the common types compared as values,
/// without formatting them (which costs thousands of instructions on every planned query).
func showsSame(_ a: Any, _ b: Any) -> Bool {
    let dynamicType = type(of: a)
    if dynamicType == type(of: b) {
        if dynamicType == Int64.self, let x = a as? Int64, let y = b as? Int64 { return x == y }
        if dynamicType == Int.self, let x = a as? Int, let y = b as? Int { return x == y }
        if dynamicType == String.self, let x = a as? String, let y = b as? String { return x == y }
    }
    return show(a) == show(b)
}

func show(_ value: Any) -> String {
    // The common constants first, told by their dynamic type: the protocol casts below each look
    // a conformance up, and every planned query describes its conditions.
    let dynamicType = type(of: value)
    if dynamicType == Int64.self, let v = value as? Int64 { return v.description }
    if dynamicType == Int.self, let v = value as? Int { return v.description }
    if dynamicType == String.self, let s = value as? String { return "\"\(s)\"" }
    if let optional = value as? any OptionalValue {
        guard let wrapped = optional.wrappedAny else { return "nil" }
        return show(wrapped)
    }
    if let s = value as? String { return "\"\(s)\"" }
    if let r = value as? any RawRepresentable { return ".\(value)(\(show(r.rawValue)))" }
    return describeValue(value)
}

/// A predicate's operand: a field of the object, or a constant. A field read through a force
/// unwrap the scope does not vouch for is `unwrapped`: evaluating it throws where the field is
/// nil, which no condition says.
enum Operand {
    case root
    case field(String)
    case unwrapped(String)
    case constant(Any)
    case nilLiteral
}

protocol OperandExpression { func operand(in scope: TranslationScope) -> Operand? }
protocol ConditionExpression { func condition(in scope: TranslationScope) -> Condition }

extension Predicate {
    /// What the planner understands of this predicate.
    var condition: Condition { Strata.condition(of: expression, in: TranslationScope()) }
}

/// The condition of any expression: `.unknown` (or `.opaque`, when it cannot throw) unless its
/// type is one this file reads.
private func condition(of expression: Any, in scope: TranslationScope) -> Condition {
    let translated: Condition
    if let conforming = conditionExpressionType(of: expression) {
        // The expression's own type, known to conform: casting to it is a comparison of type
        // metadata, where the protocol cast looks the (conditional) conformance up again.
        func translate<E: ConditionExpression>(_: E.Type) -> Condition { (expression as? E)?.condition(in: scope) ?? .unknown }
        translated = translate(conforming)
    } else {
        translated = .unknown
    }
    if case .unknown = translated, !mayThrow(expression) { return .opaque }
    return translated
}

/// The type of `expression` as a `ConditionExpression`, or nil when it is not one. The answer
/// depends only on the type, so it is looked up once per expression type: the protocol cast
/// checks conditional conformances (every operand's type), several thousand instructions on
/// every query.
private func conditionExpressionType(of expression: Any) -> (any ConditionExpression.Type)? {
    let type = Swift.type(of: expression)
    let key = ObjectIdentifier(type)
    if let known = conditionExpressionTypes.withLock({ $0[key] }) { return known.type }
    let conforming = type as? any ConditionExpression.Type
    conditionExpressionTypes.withLock { $0[key] = KnownConformance(type: conforming) }
    return conforming
}

/// An entry of `conditionExpressionTypes` (a struct, so that a known nil is told from a miss).
private struct KnownConformance: @unchecked Sendable {
    // (Metatypes are immutable: unchecked only because `any P.Type` is not declared Sendable.)
    let type: (any ConditionExpression.Type)?
}

private let conditionExpressionTypes = Mutex<[ObjectIdentifier: KnownConformance]>([:])

/// Whether evaluating `expression` may throw, read from its type, which names the type of every
/// expression inside it: Foundation's expressions throw on a nil force unwrap, a failed force
/// cast and an index outside a collection; division and nested predicates are counted in too
/// (the latter's own expression is not in the type). So is integer arithmetic, which the checked
/// evaluation (CheckedEvaluation.swift) makes throw where Foundation's would trap: a window must
/// not keep it off objects past the first matches, or the answer would depend on the plan.
private func mayThrow(_ expression: Any) -> Bool {
    if expressionMayTrap(expression) { return true }
    let name = String(reflecting: type(of: expression))
    return throwingExpressionNames.contains { name.contains($0) }
}

// Matched anywhere in the type's name, generic arguments included: an expression that may throw
// makes any expression around it one that may. A nested predicate or expression
// (`PredicateEvaluate`, `ExpressionEvaluate`) is type-erased: what it holds cannot be seen, so it
// may throw. (This toolchain's `#Predicate` takes neither, nor is `ExpressionEvaluate` of an
// `Expression` value a standard predicate expression here; a toolchain that allows them is covered.)
// `Range` too: building `lo..<hi` from fields throws when lo > hi (an expression seen by name
// only when one beside it, a regex's, has no checked form).
private let throwingExpressionNames = [
    "ForcedUnwrap", "ForceCast", "Subscript", "Division", "Remainder", "PredicateEvaluate", "ExpressionEvaluate", "Range",
]

extension PredicateExpressions.Variable: OperandExpression {
    func operand(in scope: TranslationScope) -> Operand? {
        // A closure that reads the predicate's object, not its own value, is evaluated whole
        // (found by the review of 2026-12-06: `s.inner.flatMap { _ in s.n }` read as `inner.n`).
        if let variable = scope.variable, variable != key { return nil }
        return .root
    }
}

extension PredicateExpressions.KeyPath: OperandExpression where Root: OperandExpression {
    func operand(in scope: TranslationScope) -> Operand? {
        // A double optional (`Int??`) keeps `.some(nil)` apart from nil, which a record test and
        // an index read alike as nil: conditions on such a field are evaluated on decoded objects.
        if wrapsOptional(Output.self) { return nil }
        guard let component = fieldPath(of: keyPath as PartialKeyPath<Root.Output>) else { return nil }
        switch root.operand(in: scope) {
        case .root: return .field(component)
        case .field(let parent): return .field(parent + "." + component)
        default: return nil
        }
    }
}

extension PredicateExpressions.Value: OperandExpression {
    func operand(in scope: TranslationScope) -> Operand? { .constant(value) }
}

extension PredicateExpressions.NilLiteral: OperandExpression {
    func operand(in scope: TranslationScope) -> Operand? { .nilLiteral }
}

extension PredicateExpressions.ForcedUnwrap: OperandExpression where Inner: OperandExpression {
    func operand(in scope: TranslationScope) -> Operand? {
        switch inner.operand(in: scope) {
        case .field(let path)?: return scope.nonNil.contains(path) ? .field(path) : .unwrapped(path)
        case .unwrapped(let path)?: return .unwrapped(path)
        default: return nil
        }
    }
}

extension PredicateExpressions.OptionalFlatMap: OperandExpression where LHS: OperandExpression, RHS: OperandExpression {
    func operand(in scope: TranslationScope) -> Operand? {
        // The transform reads the unwrapped value: its paths are relative to it.
        guard case .field(let parent)? = wrapped.operand(in: scope),
            case .field(let child)? = transform.operand(in: TranslationScope(variable: variable.key))
        else { return nil }
        return .field(parent + "." + child)
    }
}

/// Whether `type` is a double optional (`Int??`), looked up once per type: the protocol cast
/// looks a conformance up (~700 instructions) for every key path of every predicate translated.
private func wrapsOptional(_ type: Any.Type) -> Bool {
    let key = ObjectIdentifier(type)
    if let known = wrapsOptionalByType.withLock({ $0[key] }) { return known }
    let wraps = (type as? any OptionalValue.Type)?.wrapsOptional == true
    wrapsOptionalByType.withLock { $0[key] = wraps }
    return wraps
}

private let wrapsOptionalByType = Mutex<[ObjectIdentifier: Bool]>([:])

private func comparison(_ lhs: Operand?, _ rhs: Operand?, _ op: CompareOp) -> Condition {
    switch (lhs, rhs) {
    case let (.field(path)?, .constant(value)?): return .compare(path: path, op: op, value: value)
    case let (.constant(value)?, .field(path)?): return .compare(path: path, op: op.flipped, value: value)
    case let (.field(path)?, .nilLiteral?), let (.nilLiteral?, .field(path)?):
        if op == .eq { return .isNil(path: path, true) }
        if op == .ne { return .isNil(path: path, false) }
        return .unknown
    default: return .unknown
    }
}

extension PredicateExpressions.Equal: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    func condition(in scope: TranslationScope) -> Condition { comparison(lhs.operand(in: scope), rhs.operand(in: scope), .eq) }
}

extension PredicateExpressions.NotEqual: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    func condition(in scope: TranslationScope) -> Condition { comparison(lhs.operand(in: scope), rhs.operand(in: scope), .ne) }
}

extension PredicateExpressions.Comparison: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    func condition(in scope: TranslationScope) -> Condition {
        let mapped: CompareOp
        switch op {
        case .lessThan: mapped = .lt
        case .lessThanOrEqual: mapped = .le
        case .greaterThan: mapped = .gt
        case .greaterThanOrEqual: mapped = .ge
        @unknown default: return .unknown
        }
        return comparison(lhs.operand(in: scope), rhs.operand(in: scope), mapped)
    }
}

// `&&` and `||` evaluate their right side only after the left one: what the left side
// guarantees then (true for `&&`, false for `||`) holds on the right.

extension PredicateExpressions.Conjunction: ConditionExpression {
    func condition(in scope: TranslationScope) -> Condition {
        let left = Strata.condition(of: lhs, in: scope)
        return .and(left, Strata.condition(of: rhs, in: scope.adding(left.nonNilPaths(when: true))))
    }
}

extension PredicateExpressions.Disjunction: ConditionExpression {
    func condition(in scope: TranslationScope) -> Condition {
        let left = Strata.condition(of: lhs, in: scope)
        return .or(left, Strata.condition(of: rhs, in: scope.adding(left.nonNilPaths(when: false))))
    }
}

extension PredicateExpressions.Negation: ConditionExpression {
    func condition(in scope: TranslationScope) -> Condition { .not(Strata.condition(of: wrapped, in: scope)) }
}

extension PredicateExpressions.SequenceContains: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    func condition(in scope: TranslationScope) -> Condition {
        switch (sequence.operand(in: scope), element.operand(in: scope)) {
        case let (.constant(list)?, .field(path)?):
            guard let values = list as? [Any] else { return .unknown }
            return .inList(path: path, values: values)
        case let (.field(path)?, .constant(value)?):
            return .arrayContains(path: path, value: value)
        default:
            return .unknown
        }
    }
}

extension PredicateExpressions.SequenceStartsWith: ConditionExpression where Base: OperandExpression, Prefix: OperandExpression {
    func condition(in scope: TranslationScope) -> Condition {
        guard case .field(let path)? = base.operand(in: scope), case .constant(let value)? = prefix.operand(in: scope), let s = value as? String else {
            return .unknown
        }
        return .startsWith(path: path, prefix: s)
    }
}

extension PredicateExpressions.CollectionContainsCollection: ConditionExpression where Base: OperandExpression, Other: OperandExpression {
    func condition(in scope: TranslationScope) -> Condition {
        guard case .field(let path)? = base.operand(in: scope), case .constant(let value)? = other.operand(in: scope), let s = value as? String else {
            return .unknown
        }
        return .contains(path: path, substring: s)
    }
}
