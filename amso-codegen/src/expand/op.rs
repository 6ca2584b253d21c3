//! `#[amso_macros::op]`: one Rust function over `Buffer`s, `BufferMut`s, scalar attributes and
//! a `Stream` becomes an eager `#[pyfunction]`, XLA FFI handlers and the description
//! `amso.ops` turns into a JAX callable and a `torch.library` op (`amso_runtime::op`).
//!
//! ```text
//! #[amso_macros::op(outputs(moved = like(positions)), platforms(cpu, cuda))]
//! fn drift(positions: Buffer<'_, f32, 2>, velocities: Buffer<'_, f32, 2>,
//!          mut moved: BufferMut<'_, f32, 2>, dt: f64, stream: Stream) -> Result<(), String>
//! ```
//!
//! generates `mod drift { pub static OP: Op }` beside the function; the module registers it
//! with `amso_runtime::op::add(module, &drift::OP)`. Each output names its shape rule:
//! `like(x)` (input `x`'s shape) or a list of dimensions, each an integer, an integer
//! attribute or `x[axis]`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Expr, FnArg, GenericArgument, ItemFn, Lit, Pat, PathArguments, Type};

/// What one parameter is.
enum Kind {
    Input { element: Type, ndim: usize },
    Output { element: Type, ndim: usize },
    Attr { rust: syn::Ident },
    Stream,
}

struct Parameter {
    name: syn::Ident,
    kind: Kind,
}

/// One dimension of an output's shape rule.
enum Dim {
    Like(String),
    Of(String, usize),
    Attr(String),
    Fixed(usize),
}

#[derive(Default)]
struct Options {
    outputs: Vec<(syn::Ident, Vec<Dim>)>,
    platforms: Option<(bool, bool)>,
}

/// Expand `#[op(args)]` on `item`.
pub fn op(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let function: ItemFn = syn::parse2(item)?;
    let options = parse_options(args)?;
    let parameters = function.sig.inputs.iter().map(parameter).collect::<syn::Result<Vec<_>>>()?;
    check(&function, &parameters, &options)?;
    Ok(generate(&function, &parameters, &options))
}

fn parse_options(args: TokenStream) -> syn::Result<Options> {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("outputs") {
            meta.parse_nested_meta(|output| {
                let name = output.path.require_ident()?.clone();
                let rule: Expr = output.value()?.parse()?;
                options.outputs.push((name, shape_rule(&rule)?));
                Ok(())
            })
        } else if meta.path.is_ident("platforms") {
            let (mut cpu, mut cuda) = (false, false);
            meta.parse_nested_meta(|platform| {
                if platform.path.is_ident("cpu") {
                    cpu = true;
                } else if platform.path.is_ident("cuda") {
                    cuda = true;
                } else {
                    return Err(platform.error("expected `cpu` or `cuda`"));
                }
                Ok(())
            })?;
            options.platforms = Some((cpu, cuda));
            Ok(())
        } else {
            Err(meta.error("#[op] takes `outputs(name = rule, ...)` and `platforms(cpu, cuda)`"))
        }
    });
    syn::parse::Parser::parse2(parser, args)?;
    Ok(options)
}

/// `like(x)` or `[d, ...]`, each `d` an integer, an attribute's name or `x[axis]`.
fn shape_rule(rule: &Expr) -> syn::Result<Vec<Dim>> {
    let wrong = || {
        syn::Error::new(
            rule.span(),
            "an output's shape rule is `like(input)` or a list of dimensions, each an integer, an integer \
             attribute or `input[axis]`: `[cells, cells, cells]`, `[x[0], 3]`",
        )
    };
    match rule {
        Expr::Call(call) if call.args.len() == 1 && matches!(&*call.func, Expr::Path(p) if p.path.is_ident("like")) => {
            Ok(vec![Dim::Like(ident_of(&call.args[0]).ok_or_else(wrong)?)])
        }
        Expr::Array(list) => list
            .elems
            .iter()
            .map(|dim| match dim {
                Expr::Lit(lit) => match &lit.lit {
                    Lit::Int(size) => size.base10_parse().map(Dim::Fixed),
                    _ => Err(wrong()),
                },
                Expr::Path(_) => ident_of(dim).map(Dim::Attr).ok_or_else(wrong),
                Expr::Index(index) => {
                    let input = ident_of(&index.expr).ok_or_else(wrong)?;
                    match &*index.index {
                        Expr::Lit(syn::ExprLit { lit: Lit::Int(axis), .. }) => Ok(Dim::Of(input, axis.base10_parse()?)),
                        _ => Err(wrong()),
                    }
                }
                _ => Err(wrong()),
            })
            .collect(),
        _ => Err(wrong()),
    }
}

fn ident_of(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Path(path) => path.path.get_ident().map(|ident| ident.to_string()),
        _ => None,
    }
}

fn parameter(arg: &FnArg) -> syn::Result<Parameter> {
    let FnArg::Typed(typed) = arg else {
        return Err(syn::Error::new(arg.span(), "an op is a free function, not a method"));
    };
    let Pat::Ident(pattern) = &*typed.pat else {
        return Err(syn::Error::new(typed.pat.span(), "an op's parameters are plain names (`x: Buffer<'_, f32, 1>`)"));
    };
    let wrong = || {
        syn::Error::new(
            typed.ty.span(),
            "an op's parameters are `Buffer<'_, T, N>` (read), `BufferMut<'_, T, N>` (written), `f64`, `f32`, `i64`, \
             `i32`, `bool` (attributes) and `Stream`",
        )
    };
    let Type::Path(path) = &*typed.ty else { return Err(wrong()) };
    let last = path.path.segments.last().ok_or_else(wrong)?;
    let kind = match last.ident.to_string().as_str() {
        "Buffer" | "BufferMut" => {
            let PathArguments::AngleBracketed(generics) = &last.arguments else { return Err(wrong()) };
            let mut types = generics.args.iter().filter(|arg| !matches!(arg, GenericArgument::Lifetime(_)));
            let (Some(GenericArgument::Type(element)), Some(rank)) = (types.next(), types.next()) else {
                return Err(wrong());
            };
            let ndim = match rank {
                GenericArgument::Const(Expr::Lit(syn::ExprLit { lit: Lit::Int(n), .. })) => n.base10_parse()?,
                GenericArgument::Type(Type::Verbatim(_)) | GenericArgument::Const(_) | GenericArgument::Type(_) => {
                    // `Buffer<'_, f32, 2>` parses its rank as a const argument or, in some
                    // positions, as a literal type: read it either way.
                    rank_literal(rank).ok_or_else(|| {
                        syn::Error::new(rank.span(), "the rank of an op's buffer is an integer literal (1 to 8)")
                    })?
                }
                _ => return Err(wrong()),
            };
            if !(1..=8).contains(&ndim) {
                return Err(syn::Error::new(rank.span(), "the rank of an op's buffer is 1 to 8"));
            }
            let element = element.clone();
            if last.ident == "Buffer" {
                Kind::Input { element, ndim }
            } else {
                Kind::Output { element, ndim }
            }
        }
        "Stream" => Kind::Stream,
        "f64" | "f32" | "i64" | "i32" | "bool" if path.path.segments.len() == 1 => {
            Kind::Attr { rust: last.ident.clone() }
        }
        _ => return Err(wrong()),
    };
    Ok(Parameter { name: pattern.ident.clone(), kind })
}

fn rank_literal(rank: &GenericArgument) -> Option<usize> {
    let text = quote!(#rank).to_string();
    text.trim().parse().ok()
}

fn check(function: &ItemFn, parameters: &[Parameter], options: &Options) -> syn::Result<()> {
    let find = |name: &str| parameters.iter().find(|p| p.name == name);
    for (output, rule) in &options.outputs {
        match find(&output.to_string()) {
            Some(Parameter { kind: Kind::Output { ndim, .. }, .. }) => {
                let rank: Option<usize> = match rule.as_slice() {
                    [Dim::Like(input)] => match find(input).map(|p| &p.kind) {
                        Some(Kind::Input { ndim, .. }) => Some(*ndim),
                        _ => {
                            return Err(syn::Error::new(
                                output.span(),
                                format!("like({input}) names no Buffer parameter"),
                            ))
                        }
                    },
                    dims => Some(dims.len()),
                };
                if rank != Some(*ndim) {
                    return Err(syn::Error::new(
                        output.span(),
                        format!(
                            "output '{output}' has {ndim} dimension(s); its shape rule gives {}",
                            rank.unwrap_or(0)
                        ),
                    ));
                }
                for dim in rule {
                    match dim {
                        Dim::Of(input, axis) => match find(input).map(|p| &p.kind) {
                            Some(Kind::Input { ndim, .. }) if axis < ndim => {}
                            Some(Kind::Input { ndim, .. }) => {
                                return Err(syn::Error::new(
                                    output.span(),
                                    format!("{input}[{axis}]: '{input}' has {ndim} dimension(s)"),
                                ))
                            }
                            _ => {
                                return Err(syn::Error::new(
                                    output.span(),
                                    format!("{input}[..] names no Buffer parameter"),
                                ))
                            }
                        },
                        Dim::Attr(attr) if !matches!(find(attr).map(|p| &p.kind), Some(Kind::Attr { rust }) if rust == "i64" || rust == "i32") => {
                            return Err(syn::Error::new(
                                output.span(),
                                format!("'{attr}' in a shape rule names no integer attribute (i64 or i32 parameter)"),
                            ))
                        }
                        _ => {}
                    }
                }
            }
            _ => {
                return Err(syn::Error::new(
                    output.span(),
                    format!("outputs({output} = ...) names no BufferMut parameter"),
                ))
            }
        }
    }
    for (i, (output, _)) in options.outputs.iter().enumerate() {
        if options.outputs[..i].iter().any(|(earlier, _)| earlier == output) {
            return Err(syn::Error::new(output.span(), format!("outputs({output} = ...) is given twice")));
        }
    }
    for parameter in parameters {
        let name = parameter.name.unraw().to_string();
        if name == "OP" || name.starts_with("__amso") {
            return Err(syn::Error::new(
                parameter.name.span(),
                format!("'{name}' is a name the generated code uses (OP, __amso_*): rename the parameter"),
            ));
        }
        if matches!(parameter.kind, Kind::Output { .. }) && !options.outputs.iter().any(|(o, _)| *o == parameter.name) {
            return Err(syn::Error::new(
                parameter.name.span(),
                format!(
                    "output '{}' needs a shape rule: #[op(outputs({} = like(x)))] or a list of dimensions",
                    parameter.name, parameter.name
                ),
            ));
        }
    }
    if parameters.iter().filter(|p| matches!(p.kind, Kind::Stream)).count() > 1 {
        return Err(syn::Error::new(function.sig.span(), "an op takes at most one Stream"));
    }
    if function.sig.generics.type_params().next().is_some() || function.sig.generics.const_params().next().is_some() {
        return Err(syn::Error::new(function.sig.generics.span(), "an op has no type or const parameters"));
    }
    if let Some((false, false)) = options.platforms {
        return Err(syn::Error::new(Span::call_site(), "platforms(...) names `cpu`, `cuda` or both"));
    }
    Ok(())
}

fn generate(function: &ItemFn, parameters: &[Parameter], options: &Options) -> TokenStream {
    let name = &function.sig.ident;
    let python_name = name.to_string();
    let vis = &function.vis;
    let p = quote!(::amso_runtime::op::__private);
    let platforms = match options.platforms.unwrap_or((true, true)) {
        (true, false) => quote!(#p::Platforms::Cpu),
        (false, true) => quote!(#p::Platforms::Cuda),
        _ => quote!(#p::Platforms::Both),
    };
    let Pieces { described, decoded, eager_args, converted, call_args, shapes, ints, stream } =
        pieces(parameters, options, &p);
    let doc = format!(
        "`{python_name}` as an op (`#[amso_macros::op]`): register it with `amso_runtime::op::add(module, &{python_name}::OP)`."
    );
    quote! {
        #function

        #[doc = #doc]
        #[allow(non_snake_case, clippy::needless_lifetimes)]
        #vis mod #name {
            #[allow(unused_imports)]
            use super::*;

            /// The op, for `amso_runtime::op::add`.
            pub static OP: ::amso_runtime::op::Op = ::amso_runtime::op::Op {
                name: #python_name,
                params: &[#(#described),*],
                platforms: #platforms,
                xla: [xla_host, xla_cuda],
                eager: make_eager,
            };

            unsafe extern "C" fn xla_host(frame: *mut ::std::ffi::c_void) -> *mut ::std::ffi::c_void {
                // SAFETY: XLA's call frame.
                unsafe { #p::call(frame, &OP, false, body) }
            }

            unsafe extern "C" fn xla_cuda(frame: *mut ::std::ffi::c_void) -> *mut ::std::ffi::c_void {
                // SAFETY: XLA's call frame.
                unsafe { #p::call(frame, &OP, true, body) }
            }

            fn body(__amso_frame: &#p::Frame<'_>) -> ::std::result::Result<(), ::std::string::String> {
                #(#decoded)*
                __amso_frame.check_outputs(&OP, &[#(#shapes),*], &[#(#ints),*])?;
                #p::OpResult::into_message(super::#name(#(#call_args),*))
            }

            fn make_eager<'py>(
                module: &::pyo3::Bound<'py, ::pyo3::types::PyModule>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, ::pyo3::types::PyCFunction>> {
                ::pyo3::wrap_pyfunction!(eager, module)
            }

            #[::pyo3::pyfunction]
            #[pyo3(name = #python_name)]
            fn eager(__amso_py: ::pyo3::Python<'_>, #(#eager_args),*) -> ::pyo3::PyResult<()> {
                let mut __amso_call = #p::Eager::new(&OP);
                #(#converted)*
                __amso_call.check_outputs(&[#(#shapes),*], &[#(#ints),*])?;
                #stream
                __amso_call.run(__amso_py, move || super::#name(#(#call_args),*))
            }
        }
    }
}

/// The generated code's lists, one entry per parameter.
#[derive(Default)]
struct Pieces {
    /// `Param`s of the description.
    described: Vec<TokenStream>,
    /// The handler's decoding of XLA's frame.
    decoded: Vec<TokenStream>,
    /// The eager `#[pyfunction]`'s parameters.
    eager_args: Vec<TokenStream>,
    /// The eager entry's conversions to buffers (the stream last).
    converted: Vec<TokenStream>,
    /// The function's arguments.
    call_args: Vec<TokenStream>,
    /// Each buffer's (name, shape), for the outputs' shape rules.
    shapes: Vec<TokenStream>,
    /// Each integer attribute's (name, value as i64).
    ints: Vec<TokenStream>,
    /// The eager entry's choice of stream (after every buffer is placed), bound to the
    /// function's `Stream` parameter if it has one.
    stream: TokenStream,
}

fn pieces(parameters: &[Parameter], options: &Options, p: &TokenStream) -> Pieces {
    let rule = |output: &syn::Ident| -> Vec<TokenStream> {
        let (_, dims) = options.outputs.iter().find(|(o, _)| o == output).expect("checked");
        dims.iter()
            .map(|dim| match dim {
                Dim::Like(input) => quote!(#p::Dim::Like(#input)),
                Dim::Of(input, axis) => quote!(#p::Dim::Of(#input, #axis)),
                Dim::Attr(attr) => quote!(#p::Dim::Attr(#attr)),
                Dim::Fixed(size) => quote!(#p::Dim::Fixed(#size)),
            })
            .collect()
    };
    let mut pieces = Pieces::default();
    let Pieces { described, decoded, eager_args, converted, call_args, shapes, ints, stream } = &mut pieces;
    let (mut input_index, mut output_index) = (0usize, 0usize);
    *stream = quote!(let _ = __amso_call.stream()?;);
    for parameter in parameters {
        let ident = &parameter.name;
        let text = ident.unraw().to_string();
        call_args.push(quote!(#ident));
        if matches!(parameter.kind, Kind::Input { .. } | Kind::Output { .. }) {
            shapes.push(quote!((#text, &#ident.shape()[..])));
        }
        match &parameter.kind {
            Kind::Input { element, ndim } => {
                described.push(quote!(#p::Param::Input {
                    name: #text, dtype: &<#element as ::amso_runtime::ArrayElement>::DTYPE, ndim: #ndim
                }));
                decoded.push(quote!(let #ident = __amso_frame.input::<#element, #ndim>(#input_index, #text)?;));
                eager_args.push(quote!(#ident: ::amso_runtime::python::ArrayRef<'_, #element, #ndim>));
                converted.push(quote!(let #ident = __amso_call.input(&#ident, #text)?;));
                input_index += 1;
            }
            Kind::Output { element, ndim } => {
                let shape = rule(ident);
                described.push(quote!(#p::Param::Output {
                    name: #text, dtype: &<#element as ::amso_runtime::ArrayElement>::DTYPE, ndim: #ndim,
                    shape: &[#(#shape),*]
                }));
                decoded.push(quote!(let #ident = __amso_frame.output::<#element, #ndim>(#output_index, #text)?;));
                eager_args.push(quote!(mut #ident: ::amso_runtime::python::ArrayMut<'_, #element, #ndim>));
                converted.push(quote!(let #ident = __amso_call.output(&mut #ident, #text)?;));
                output_index += 1;
            }
            Kind::Attr { rust } => {
                let kind = format_ident!(
                    "{}",
                    match rust.to_string().as_str() {
                        "f64" => "F64",
                        "f32" => "F32",
                        "i64" => "I64",
                        "i32" => "I32",
                        _ => "Bool",
                    }
                );
                described.push(quote!(#p::Param::Attr { name: #text, kind: #p::AttrKind::#kind }));
                decoded.push(quote!(let #ident = __amso_frame.attr::<#rust>(#text)?;));
                eager_args.push(quote!(#ident: #rust));
                if rust == "i64" || rust == "i32" {
                    ints.push(quote!((#text, i64::from(#ident))));
                }
            }
            Kind::Stream => {
                described.push(quote!(#p::Param::Stream));
                decoded.push(quote!(let #ident = __amso_frame.stream();));
                *stream = quote!(let #ident = __amso_call.stream()?;);
            }
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(args: TokenStream, item: TokenStream) -> String {
        op(args, item).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn an_output_without_a_rule_is_refused_by_name() {
        let message = error(
            quote!(),
            quote!(
                fn f(x: Buffer<'_, f32, 1>, y: BufferMut<'_, f32, 1>) {}
            ),
        );
        assert!(message.contains("output 'y' needs a shape rule"), "{message}");
    }

    #[test]
    fn a_rule_of_the_wrong_rank_is_refused() {
        let message = error(
            quote!(outputs(y = [n, n])),
            quote!(
                fn f(x: Buffer<'_, f32, 1>, y: BufferMut<'_, f32, 1>, n: i64) {}
            ),
        );
        assert!(message.contains("output 'y' has 1 dimension(s); its shape rule gives 2"), "{message}");
    }

    #[test]
    fn a_rule_naming_a_float_attribute_is_refused() {
        let message = error(
            quote!(outputs(y = [s])),
            quote!(
                fn f(x: Buffer<'_, f32, 1>, y: BufferMut<'_, f32, 1>, s: f64) {}
            ),
        );
        assert!(message.contains("'s' in a shape rule names no integer attribute"), "{message}");
    }

    #[test]
    fn an_axis_beyond_the_inputs_rank_is_refused() {
        let message = error(
            quote!(outputs(y = [x[2]])),
            quote!(
                fn f(x: Buffer<'_, f32, 2>, y: BufferMut<'_, f32, 1>) {}
            ),
        );
        assert!(message.contains("x[2]: 'x' has 2 dimension(s)"), "{message}");
    }

    #[test]
    fn a_parameter_named_like_the_generated_code_is_refused() {
        let message = error(
            quote!(),
            quote!(
                fn f(OP: f64) {}
            ),
        );
        assert!(message.contains("'OP' is a name the generated code uses"), "{message}");
        let message = error(
            quote!(outputs(y = like(x), y = like(x))),
            quote!(
                fn f(x: Buffer<'_, f32, 1>, y: BufferMut<'_, f32, 1>) {}
            ),
        );
        assert!(message.contains("outputs(y = ...) is given twice"), "{message}");
    }

    #[test]
    fn a_rank_outside_1_to_8_is_refused() {
        let message = error(
            quote!(),
            quote!(
                fn f(x: Buffer<'_, f32, 9>) {}
            ),
        );
        assert!(message.contains("the rank of an op's buffer is 1 to 8"), "{message}");
    }

    #[test]
    fn an_unknown_parameter_type_is_refused() {
        let message = error(
            quote!(),
            quote!(
                fn f(x: Vec<f32>) {}
            ),
        );
        assert!(message.contains("an op's parameters are `Buffer"), "{message}");
    }

    #[test]
    fn a_valid_op_expands_to_its_module() {
        let tokens = op(
            quote!(outputs(y = like(x)), platforms(cpu)),
            quote!(
                fn scale(x: Buffer<'_, f32, 1>, mut y: BufferMut<'_, f32, 1>, factor: f64, stream: Stream) {}
            ),
        )
        .unwrap()
        .to_string();
        assert!(tokens.contains("mod scale"), "{tokens}");
        assert!(tokens.contains("Platforms :: Cpu"), "{tokens}");
        assert!(tokens.contains("Dim :: Like (\"x\")"), "{tokens}");
    }
}
